"""What a request produces: a ``GenerationStep`` per token (streamed) and the ``Generation`` they add up to.

Every path returns these same records - ``generate``, ``stream_generate``, ``generate_batch``, the ``Engine``, the
server - so a test can compare any two of them field for field.
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class GenerationStep:
    token_id: int
    text: str  # the complete UTF-8 text this token made available (may be "")
    logprob: float
    finish_reason: str | None = None  # set on the last step: "eos" | "length" | "context" | "stop"
    # (an Engine request's Generation may also end "cancelled"; no step carries that)
    top_logprobs: tuple[tuple[int, float], ...] = ()  # (id, logprob) of the N likeliest, when asked for N
    from_draft: bool = False  # speculative decoding: a drafted token the model confirmed (mlx-lm's name)


@dataclass
class Generation:
    token_ids: list[int]  # generated only; an EOS that ended generation is not included
    text: str
    finish_reason: str  # "eos" | "length" | "context" | "stop" (| "cancelled" from an Engine)
    prompt_ids: list[int] = field(default_factory=list)
    eos_token_id: int | None = None  # the EOS id that ended generation, reported separately
    logprobs: list[float] = field(default_factory=list)
    prompt_seconds: float = 0.0
    generation_seconds: float = 0.0
    forward_passes: int = 0
    cached_tokens: int = 0  # prompt tokens whose K/V came from a prefix cache (Engine, or a radix cache here)
    drafted_tokens: int = 0  # speculative decoding: tokens proposed, and those the model confirmed
    accepted_tokens: int = 0

    @property
    def prompt_tps(self) -> float:
        return len(self.prompt_ids) / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def generation_tps(self) -> float:
        return len(self.token_ids) / self.generation_seconds if self.generation_seconds else 0.0
