"""OpenAI's additive logit adjustments: ``logit_bias``, ``presence_penalty``, ``frequency_penalty``.

Why: OpenAI clients send them (a chat UI's "frequency penalty" slider, a classifier's ``logit_bias`` that pins
the answer to a few label tokens), and a server that ignores them returns something the user did not ask for.

Contract, on the raw float32 logits [V] of one step, before the constraint mask and the sampler:

    z[j] += logit_bias[j]
    z[j] -= presence_penalty * (c[j] > 0) + frequency_penalty * c[j]

where ``c[j]`` counts token ``j`` among the tokens *generated so far* in this answer (the prompt does not count:
OpenAI's and vLLM's rule; mlx-lm's server counts the last 20 tokens of prompt and answer instead). Bias values
lie in [-100, 100] (±100 bans or forces a token in practice), penalties in [-2, 2], OpenAI's ranges. The reported
``logprob`` of a token stays that of the raw logits, as it is without penalties.
"""

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import GenerateError

BIAS_LIMIT = 100.0
PENALTY_LIMIT = 2.0


@dataclass(frozen=True)
class Penalties:
    presence: float = 0.0
    frequency: float = 0.0
    bias: tuple[tuple[int, float], ...] = field(default=())  # (token id, added logit), ids unique

    @classmethod
    def make(
        cls,
        vocab_size: int,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        logit_bias: Mapping[int, float] | Iterable[Sequence[float]] | None = None,
    ) -> "Penalties":
        """Checked: a value out of range or a token id outside the vocabulary is a ``GenerateError`` naming it.
        ``logit_bias`` is ``{id: bias}`` or ``[[id, bias], ...]`` (what a JSON round trip leaves of it)."""
        out = []
        for name, v in (("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty)):
            if v is None:
                v = 0.0
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not -PENALTY_LIMIT <= v <= PENALTY_LIMIT:
                raise GenerateError(f"{name} must be a number in [-2, 2], got {v!r}")
            out.append(float(v))
        pairs = logit_bias.items() if isinstance(logit_bias, Mapping) else (logit_bias or ())
        bias: dict[int, float] = {}
        for pair in pairs:
            token, value = pair
            if type(token) is not int or not 0 <= token < vocab_size:
                raise GenerateError(f"logit_bias: token id {token!r} is not in the vocabulary [0, {vocab_size})")
            ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            if not ok or not -BIAS_LIMIT <= value <= BIAS_LIMIT:
                raise GenerateError(f"logit_bias: token {token}'s bias must be a number in [-100, 100], got {value!r}")
            bias[token] = float(value)
        return cls(out[0], out[1], tuple(sorted(bias.items())))

    @property
    def active(self) -> bool:
        return bool(self.presence or self.frequency or self.bias)

    def pairs(self) -> list[list[float]]:
        """``bias`` as JSON-safe ``[[id, bias], ...]`` (a lockstep peer rebuilds the same ``Penalties``)."""
        return [[t, b] for t, b in self.bias]

    def apply(self, logits: np.ndarray, generated: Sequence[int]) -> np.ndarray:
        """The adjusted copy of ``logits [V]`` (the input is left alone)."""
        if not self.active:
            return logits
        z = np.array(logits, dtype=np.float32)
        if self.bias:
            ids = np.fromiter((t for t, _ in self.bias), np.int64, len(self.bias))
            z[ids] += np.fromiter((b for _, b in self.bias), np.float32, len(self.bias))
        if generated and (self.presence or self.frequency):
            ids, counts = np.unique(np.asarray(generated, dtype=np.int64), return_counts=True)
            keep = ids < z.shape[0]
            ids, counts = ids[keep], counts[keep]
            z[ids] -= np.float32(self.presence) + np.float32(self.frequency) * counts.astype(np.float32)
        return z
