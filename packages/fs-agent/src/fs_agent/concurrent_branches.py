"""Branches at once: one ``fs_generate.Engine``, one copy of the checkpoint's prefix blocks, a thread per branch.

``run_branch`` runs one branch's agent loop to its end; ``run_branches`` runs several side by side. Each branch keeps
its own workspace, receipts and evaluation and runs the same loop in its own thread; its generator hands every
prompt to one shared engine, which batches whatever the branches ask for at the same moment into one forward pass.
Before the branches start, the checkpoint's prompt is prefilled once, so its full blocks sit in the engine's prefix
cache and every branch's prompts start from them (a prefix shared by reference, not copied per branch).

Contract: each ``BranchOutcome`` is what ``run_branch`` with a ``KvPrefixGenerator`` gives for that branch alone -
the same greedy tokens (the engine's output is ``generate``'s; bit for bit on the fast kernels), EOS set and token
budget, so the same actions, files and receipts. ``reuse.avoided_prefill_tokens`` is what the engine really
skipped: the prefix's full blocks (up to ``block_size - 1`` fewer tokens than the dense prefix's ``n``).
"""

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fs_generate import Engine

from .branching import BranchOutcome, PrefixReuse, check_extends, render_ids, run_branch
from .checkpoint import AgentCheckpoint, ModelCheckpoint
from .evaluation import EvaluationCase
from .loop import AgentLimits
from .protocol import AgentError, Message


@dataclass(frozen=True)
class Branch:
    name: str
    steering: str
    workspace: Any
    receipts: Any
    case: EvaluationCase


class EngineBranchGenerator:
    """``KvPrefixGenerator``'s contract (restore, then ``generate(messages) -> str`` from the saved prefix) over a
    shared engine: greedy, the model's EOS set, at most ``max_tokens`` per response."""

    def __init__(
        self,
        engine: Engine,
        tokenizer: Any,
        checkpoint: ModelCheckpoint,
        max_tokens: int,
        enable_thinking: bool,
        json_schema: Any = None,
    ):
        if type(max_tokens) is not int or max_tokens <= 0:
            raise ValueError("max_tokens must be a positive integer")
        self.engine, self.tokenizer, self.checkpoint = engine, tokenizer, checkpoint
        self.max_tokens, self.enable_thinking, self.json_schema = max_tokens, enable_thinking, json_schema
        self.response_index = checkpoint.response_index
        self._restored = False
        n = len(checkpoint.cached_token_ids)
        self._reuse = PrefixReuse(n, checkpoint.layer_offsets, 0)

    @property
    def reuse(self) -> PrefixReuse:
        return self._reuse

    def restore_checkpoint(self, cp: Any) -> None:
        if cp != self.checkpoint:
            raise AgentError("model checkpoint does not match the saved KV prefix")
        self.response_index, self._restored = cp.response_index, True

    def __call__(self, messages: list[Message]) -> str:
        if not self._restored:
            raise AgentError("restore the checkpoint before generating")
        ids = render_ids(self.tokenizer, messages, True, self.enable_thinking)
        prefix = self.checkpoint.cached_token_ids
        check_extends(ids, prefix)
        done = self.engine.submit(ids, max_new_tokens=self.max_tokens, json_schema=self.json_schema).result()
        self.response_index += 1
        self._reuse = PrefixReuse(len(prefix), self.checkpoint.layer_offsets, min(done.cached_tokens, len(prefix)))
        return str(self.tokenizer.decode(done.token_ids))


def run_branches(
    branches: Sequence[Branch],
    checkpoint: AgentCheckpoint,
    model: Any,
    tokenizer: Any,
    *,
    max_tokens: int,
    enable_thinking: bool = False,
    limits: AgentLimits | None = None,
    engine: Engine | None = None,
    json_schema: Any = None,
) -> list[BranchOutcome]:
    """Every branch concurrently from ``checkpoint`` in one engine (``engine``, else one made for ``model``);
    outcomes in the order given. ``json_schema`` constrains every response (as ``KvPrefixGenerator``'s)."""
    names = [b.name for b in branches]
    if not branches or len(set(names)) != len(names):
        raise ValueError(f"run_branches needs branches with distinct names, got {names!r}")
    cp = checkpoint.model
    if tuple(render_ids(tokenizer, checkpoint.message_dicts(), False, enable_thinking)) != cp.cached_token_ids:
        raise AgentError("the saved checkpoint's tokens do not match this model and tokenizer")
    engine = engine or Engine(model, tokenizer, max_batch=max(2, len(branches)))
    engine.submit(list(cp.cached_token_ids), max_new_tokens=1).result()  # the shared prefix, prefilled once
    started = not engine.running_in_background()
    engine.start()
    try:
        with ThreadPoolExecutor(len(branches), thread_name_prefix="fs-branch") as pool:
            jobs = [
                pool.submit(
                    run_branch,
                    b.name,
                    b.steering,
                    checkpoint,
                    EngineBranchGenerator(engine, tokenizer, cp, max_tokens, enable_thinking, json_schema),
                    b.workspace,
                    b.receipts,
                    b.case,
                    limits,
                )
                for b in branches
            ]
            return [j.result() for j in jobs]
    finally:
        if started:
            engine.stop()
