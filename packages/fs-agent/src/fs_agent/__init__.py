"""fs_agent: a tool-using agent with approvals, receipts, checkpoints, steering and fork/steer/select
on a shared KV prefix."""

__version__ = "0.1.0"
