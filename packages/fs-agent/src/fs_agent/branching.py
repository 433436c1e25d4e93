"""Fork, steer and select: branches that share one immutable KV prefix of a real model, each run and evaluated."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fs_generate import prefill
from fs_kvcache import DenseKVCache

from .checkpoint import AgentCheckpoint, ModelCheckpoint
from .evaluation import EvaluationCase, EvaluationReport, evaluate_run
from .generation import PROMPT_LOOKUP, greedy_decode
from .loop import AgentEvent, AgentLimits, AgentRun
from .protocol import AgentError, Message
from .steering import resume_with_steering


def render_ids(tokenizer: Any, messages: list[Message], generation_prompt: bool, enable_thinking: bool) -> list[int]:
    """The messages through the tokenizer's chat template, as token ids (any failure is the caller's input)."""
    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt, enable_thinking=enable_thinking
        )
    except Exception as e:  # the template belongs to the tokenizer: any failure is the caller's input
        raise AgentError(f"could not render checkpoint messages: {e}") from None
    if not isinstance(text, str):
        raise AgentError("chat template must render text")
    try:
        ids = tokenizer.encode(text, add_special_tokens=False)
    except Exception as e:
        raise AgentError(f"tokenizer returned invalid token ids: {e}") from None
    if not isinstance(ids, list | tuple) or not all(type(i) is int and i >= 0 for i in ids):
        raise AgentError("tokenizer returned invalid token ids")
    return list(ids)


def check_extends(ids: list[int], prefix: tuple[int, ...]) -> None:
    """A resumed branch's prompt must be the saved prefix's tokens exactly, then something more."""
    if tuple(ids[: len(prefix)]) != prefix:
        raise AgentError("steered prompt does not extend the saved token prefix")
    if len(ids) == len(prefix):
        raise AgentError("steered prompt must add tokens after the saved prefix")


@dataclass(frozen=True)
class PrefixReuse:
    reused_tokens: int
    layer_offsets: tuple[int, ...]
    avoided_prefill_tokens: int


@dataclass(frozen=True)
class BranchOutcome:
    name: str
    steering: str
    run: AgentRun
    report: EvaluationReport
    reuse: PrefixReuse


@dataclass
class _Prefix:
    tokens: tuple[int, ...]
    checkpoint: ModelCheckpoint
    key_values: tuple[tuple[Any, Any], ...]


class KvPrefixGenerator:
    """A ``generate(messages) -> str`` that saves one rendered prefix's per-layer K/V and serves every later call
    (and every fork) from it: only the suffix after the saved prefix is ever prefilled."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_tokens: int,
        enable_thinking: bool = False,
        json_schema: Any = None,
        prompt_lookup: int = PROMPT_LOOKUP,
    ):
        """``json_schema``: decode every response under it (e.g. ``protocol.action_schema``); None decodes freely.
        ``prompt_lookup``: drafts per pass (lossless speculative decoding, generation.py; 0 turns it off)."""
        if type(max_tokens) is not int or max_tokens <= 0:
            raise ValueError("max_tokens must be a positive integer")
        if type(enable_thinking) is not bool:
            raise ValueError("enable_thinking must be a boolean")
        layers = getattr(model, "num_hidden_layers", None)
        if layers is None:
            layers = getattr(getattr(model, "config", None), "num_hidden_layers", None)
        if type(layers) is not int or layers <= 0:
            raise ValueError("model must expose a positive num_hidden_layers")
        self.model, self.tokenizer, self.max_tokens, self.enable_thinking = (
            model,
            tokenizer,
            max_tokens,
            enable_thinking,
        )
        self.layers, self.json_schema, self.prompt_lookup = layers, json_schema, prompt_lookup
        self.response_index = 0
        self._prefix: _Prefix | None = None
        self._restored = False
        self._reuse = PrefixReuse(0, (), 0)

    @property
    def reuse(self) -> PrefixReuse:
        return self._reuse

    def _encode(self, messages: list[Message], generation_prompt: bool) -> list[int]:
        return render_ids(self.tokenizer, messages, generation_prompt, self.enable_thinking)

    def save_checkpoint(self, messages: list[Message]) -> ModelCheckpoint:
        if self._prefix is not None:
            raise AgentError("prefix checkpoint was already saved")
        ids = self._encode(messages, False)
        if not ids:
            raise AgentError("checkpoint prompt must contain at least one token")
        caches = [DenseKVCache() for _ in range(self.layers)]
        prefill(self.model, ids, caches, chunk=len(ids))  # one call, as a saved checkpoint records
        for c in caches:
            c.materialize()
        if any(c.key_values is None or c.offset != len(ids) for c in caches):
            raise AgentError("model did not populate every dense cache layer")
        cp = ModelCheckpoint(len(messages), self.response_index, tuple(ids), tuple(c.offset for c in caches))
        self._prefix = _Prefix(tuple(ids), cp, tuple(c.key_values for c in caches))  # type: ignore[misc]
        self._reuse = PrefixReuse(len(ids), cp.layer_offsets, len(ids))
        return cp

    @property
    def prefix_state(self) -> tuple[tuple[int, ...], tuple[tuple[Any, Any], ...]] | None:
        """(token ids, per-layer K/V) of the saved prefix, for persisting it."""
        return None if self._prefix is None else (self._prefix.tokens, self._prefix.key_values)

    def adopt_prefix(self, checkpoint: ModelCheckpoint, key_values: Any) -> None:
        """Use a prefix saved earlier (e.g. a prompt-cache file) instead of prefilling it again; the K/V must cover
        exactly the checkpoint's tokens in every layer."""
        if self._prefix is not None:
            raise AgentError("prefix checkpoint was already saved")
        kv = tuple((k, v) for k, v in key_values)
        n = len(checkpoint.cached_token_ids)
        if len(kv) != self.layers or any(k.shape[2] != n or v.shape[2] != n for k, v in kv):
            raise AgentError("saved KV prefix does not match the checkpoint's tokens")
        self._prefix = _Prefix(checkpoint.cached_token_ids, checkpoint, kv)
        self._reuse = PrefixReuse(n, checkpoint.layer_offsets, n)

    def restore_checkpoint(self, cp: Any) -> None:
        if not isinstance(cp, ModelCheckpoint):
            raise AgentError("model checkpoint is invalid")
        if self._prefix is None or cp != self._prefix.checkpoint:
            raise AgentError("model checkpoint does not match the saved KV prefix")
        self.response_index = cp.response_index
        self._restored = True

    def fork(self) -> "KvPrefixGenerator":
        if self._prefix is None:
            raise AgentError("save a prefix checkpoint before forking")
        child = KvPrefixGenerator(self.model, self.tokenizer, self.max_tokens, self.enable_thinking, self.json_schema,
                                  self.prompt_lookup)  # fmt: skip
        child._prefix = self._prefix  # shared by reference: tokens, checkpoint and K/V arrays
        child.response_index, child._reuse = self.response_index, self._reuse
        return child

    def __call__(self, messages: list[Message]) -> str:
        if not self._restored or self._prefix is None:
            raise AgentError("restore the checkpoint before generating")
        ids = self._encode(messages, True)
        prefix = self._prefix
        n = len(prefix.tokens)
        check_extends(ids, prefix.tokens)
        caches = [DenseKVCache(key_values=kv) for kv in prefix.key_values]
        out = greedy_decode(self.model, self.tokenizer, ids[n:], caches, n, self.max_tokens, self.json_schema,
                            self.prompt_lookup, history=ids[:n])  # fmt: skip
        self.response_index += 1
        self._reuse = PrefixReuse(n, prefix.checkpoint.layer_offsets, n)
        return self.tokenizer.decode(out)


def run_branch(
    name: str,
    steering: str,
    checkpoint: AgentCheckpoint,
    generate: Any,
    workspace: Any,
    receipts: Any,
    case: EvaluationCase,
    limits: AgentLimits | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
) -> BranchOutcome:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("branch name must not be blank")
    run = resume_with_steering(checkpoint, steering, generate, workspace, limits, on_event)
    report = evaluate_run(run, workspace, receipts, case)
    reuse = getattr(generate, "reuse", None)
    if not isinstance(reuse, PrefixReuse):
        raise AgentError("branch generator did not report prefix reuse")
    return BranchOutcome(name, steering, run, report, reuse)


def select_branch(outcomes: Any, selected_name: str) -> BranchOutcome:
    if not isinstance(selected_name, str) or not selected_name.strip():
        raise ValueError("selected branch name must not be blank")
    hits = [o for o in outcomes if o.name == selected_name]
    if len(hits) != 1:
        raise AgentError("selected branch name must match exactly one outcome")
    if not hits[0].report.passed:
        failed = ", ".join(c.name for c in hits[0].report.checks if not c.passed)
        raise AgentError(f"selected branch must pass evaluation: {selected_name!r} failed {failed}")
    return hits[0]
