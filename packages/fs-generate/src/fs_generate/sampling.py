"""Choosing the next token from the last position's logits [V].

Greedy needs no softmax: the largest logit wins (``np.argmax`` returns the lowest id on exact ties).
Sampling, in this order on float32 logits: temperature -> top-k -> top-p -> min-p -> renormalize -> draw, the
draw made on the host from the float64 distribution with a seeded numpy Generator (reproducible anywhere).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .errors import GenerateError

TOP_P_SLACK = 1e-6


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    repetition_context_size: int = 20

    def __post_init__(self) -> None:
        if not (
            isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature >= 0
        ):
            raise GenerateError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if type(self.top_k) is not int or self.top_k < 0:
            raise GenerateError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise GenerateError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not (isinstance(self.min_p, (int, float)) and 0 <= self.min_p <= 1):
            raise GenerateError(f"min_p must be in [0, 1], got {self.min_p!r}")
        rp = self.repetition_penalty
        if rp is not None and not (isinstance(rp, (int, float)) and math.isfinite(rp) and rp > 0):
            raise GenerateError(f"repetition_penalty must be a finite number > 0, got {rp!r}")
        if type(self.repetition_context_size) is not int or self.repetition_context_size < 1:
            raise GenerateError(f"repetition_context_size must be a positive int, got {self.repetition_context_size!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def apply_repetition_penalty(logits: np.ndarray, history: Sequence[int], penalty: float, window: int) -> np.ndarray:
    """mlx-lm's rule over the last ``window`` tokens: positive logits divided by the penalty, negative multiplied."""
    ids = np.unique(np.asarray(history[-window:], dtype=np.int64))
    if not ids.size:
        return logits
    out = logits.copy()
    sel = out[ids]
    out[ids] = np.where(sel > 0, sel / penalty, sel * penalty)
    return out


def distribution(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The renormalized float64 distribution sampling draws from (temperature > 0)."""
    # every step in place where it can be (``logprob`` says why): 1.6 ms a token before, the same bits
    z = logits.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        z /= np.float32(p.temperature)
    V = z.shape[0]
    top = z.max()
    if not np.isfinite(top):  # T so small (1e-45) that logits / T overflow: the T -> 0 limit is greedy
        probs = np.zeros(V)
        probs[int(np.argmax(logits))] = 1.0
        return probs
    keep = None
    if 0 < p.top_k < V:
        order = np.lexsort((np.arange(V), -z))  # by logit descending, ties by lower id
        keep = np.zeros(V, dtype=bool)
        keep[order[: p.top_k]] = True
        top = z[keep].max()
    z -= top
    probs = z.astype(np.float64)
    np.exp(probs, out=probs)
    if keep is not None:
        probs *= keep
    probs /= probs.sum()
    if p.top_p < 1.0:
        order = np.lexsort((np.arange(V), -probs))
        mass = np.cumsum(probs[order])
        # smallest prefix with mass >= p; 1e-6 slack so float32 rounding of the logits cannot add a token
        n = int(np.searchsorted(mass, p.top_p * mass[-1] - TOP_P_SLACK)) + 1
        cut = np.zeros(V, dtype=bool)
        cut[order[:n]] = True
        probs = probs * cut
    if p.min_p > 0.0:
        probs = np.where(probs >= p.min_p * probs.max(), probs, 0.0)
    probs /= probs.sum()
    return probs


def penalized(logits: np.ndarray, p: SamplingParams, history: Sequence[int]) -> np.ndarray:
    """``logits`` with ``p``'s repetition penalty over ``history`` (unchanged without one): fs's draw and a user's
    sampler (user_hooks.py) both see this."""
    if p.repetition_penalty is not None and p.repetition_penalty != 1.0:
        return apply_repetition_penalty(logits, history, p.repetition_penalty, p.repetition_context_size)
    return logits


def choose(logits: np.ndarray, p: SamplingParams, rng: np.random.Generator | None, history: Sequence[int]) -> int:
    logits = penalized(logits, p, history)
    if p.greedy:
        return int(np.argmax(logits))
    probs = distribution(logits, p)
    u = (rng or np.random.default_rng()).random()
    return int(min(np.searchsorted(np.cumsum(probs), u, side="right"), np.flatnonzero(probs)[-1]))


def top_logprobs(logits: np.ndarray, k: int) -> tuple[tuple[int, float], ...]:
    """The ``k`` most likely tokens of the raw logits with their log-probabilities (as ``logprob``), most likely
    first; equal logits in id order (a stable order, so a response never depends on the sort's whims)."""
    z = logits.astype(np.float64)
    e = z - z.max()
    np.exp(e, out=e)  # in place (``logprob`` says why)
    lse = z.max() + np.log(e.sum())
    k = min(k, z.shape[0])
    cut = np.partition(z, z.shape[0] - k)[z.shape[0] - k]  # the k-th largest: O(V), not a sort of 151,936
    near = np.flatnonzero(z >= cut)  # the top k and whatever ties the k-th
    ids = near[np.lexsort((near, -z[near]))][:k]
    return tuple((int(i), float(z[i] - lse)) for i in ids)


def logprob(logits: np.ndarray, token: int) -> float:
    """log softmax of the raw logits (temperature 1, before any filtering) at ``token``: ``z[token] - m - log Σ
    exp(z - m)`` in float64. In place in one float64 copy: each temporary of 151,936 float64 was a fresh 1.2 MB
    mapping whose first touch faulted its pages in (1.1 ms a token against 0.15, the same bits)."""
    z = logits.astype(np.float64)
    m = z.max()
    at = z[token] - m
    z -= m
    np.exp(z, out=z)
    return float(at - np.log(z.sum()))
