"""fs_agent: a tool-using agent with approvals, receipts, checkpoints, steering and fork/steer/select on a shared
KV prefix."""

import fs_weights as _fs_weights  # noqa: F401 - first: its interrupts guard precedes the heavy imports

from .branching import BranchOutcome, KvPrefixGenerator, PrefixReuse, run_branch, select_branch
from .checkpoint import AgentCheckpoint, ModelCheckpoint, create_checkpoint
from .compaction import CompactionResult, compact_completed_interactions
from .concurrent_branches import Branch, EngineBranchGenerator, run_branches
from .evaluation import (
    EvaluationCase,
    EvaluationCheck,
    EvaluationReport,
    FileExpectation,
    ReceiptExpectation,
    ResultExpectation,
    evaluate_run,
)
from .evidence import ArtifactRef, ArtifactStore, BoundedEvidenceWorkspace
from .generation import generate_response, initial_messages
from .loop import AgentEvent, AgentLimits, AgentRun, build_system_prompt, resume_agent, run_agent, run_to_checkpoint
from .protocol import AgentError, FinalAction, ToolAction, parse_action
from .receipts import EffectReceipt, ReceiptStore
from .steering import AgentStatus, inspect_checkpoint, resume_with_steering
from .workspace import ApprovalDecision, ToolPolicy, Workspace

__version__ = "0.1.0"
__all__ = [
    "AgentCheckpoint",
    "AgentError",
    "AgentEvent",
    "AgentLimits",
    "AgentRun",
    "AgentStatus",
    "ApprovalDecision",
    "ArtifactRef",
    "ArtifactStore",
    "BoundedEvidenceWorkspace",
    "Branch",
    "BranchOutcome",
    "CompactionResult",
    "EffectReceipt",
    "EngineBranchGenerator",
    "EvaluationCase",
    "EvaluationCheck",
    "EvaluationReport",
    "FileExpectation",
    "FinalAction",
    "KvPrefixGenerator",
    "ModelCheckpoint",
    "PrefixReuse",
    "ReceiptExpectation",
    "ReceiptStore",
    "ResultExpectation",
    "ToolAction",
    "ToolPolicy",
    "Workspace",
    "build_system_prompt",
    "compact_completed_interactions",
    "create_checkpoint",
    "evaluate_run",
    "generate_response",
    "initial_messages",
    "inspect_checkpoint",
    "parse_action",
    "resume_agent",
    "resume_with_steering",
    "run_agent",
    "run_branch",
    "run_branches",
    "run_to_checkpoint",
    "select_branch",
]
