"""When generation ends: EOS ids, the token budget, the context limit and stop strings."""

from collections.abc import Iterable, Sequence
from typing import Any

from .errors import GenerateError


def model_eos_ids(model: Any, tokenizer: Any = None) -> frozenset[int]:
    """The model's EOS set, read once when it was loaded (``fs_model.Model.eos_token_ids``: config.json and
    generation_config.json); a duck-typed model's ``config.eos_token_id``; the tokenizer's as a fallback."""
    ids: set[int] = set(getattr(model, "eos_token_ids", ()) or ())
    eos = getattr(getattr(model, "config", None), "eos_token_id", None)
    ids.update(eos if isinstance(eos, list) else [eos] if isinstance(eos, int) else [])
    if not ids and tokenizer is not None:
        ids.update(getattr(tokenizer, "eos_token_ids", ()) or ())
        eos = getattr(tokenizer, "eos_token_id", None)
        ids.update([eos] if type(eos) is int else [])
    return frozenset(ids)


def resolve_eos(model: Any, tokenizer: Any, eos_token_ids: Iterable[int] | None) -> frozenset[int]:
    if eos_token_ids is None:
        return model_eos_ids(model, tokenizer)
    if isinstance(eos_token_ids, (str, bytes)) or not hasattr(eos_token_ids, "__iter__"):
        raise GenerateError(f"eos_token_ids must be a list of token ids, got {type(eos_token_ids).__name__}")
    ids = list(eos_token_ids)
    if not all(type(i) is int and i >= 0 for i in ids):
        raise GenerateError(f"eos_token_ids must be non-negative ints, got {ids!r}")
    vocab = getattr(model, "vocab_size", None)
    if isinstance(vocab, int) and any(i >= vocab for i in ids):
        raise GenerateError(
            f"eos_token_ids {[i for i in ids if i >= vocab]} are not ids of the {vocab}-token vocabulary"
        )
    return frozenset(ids)


class StopStrings:
    """Finds the earliest stop string in the text generated so far (a stop string may span tokens)."""

    def __init__(self, stop: Sequence[str]):
        if isinstance(stop, str):
            stop = [stop]
        if not all(isinstance(s, str) and s for s in stop):
            raise GenerateError(f"stop strings must be non-empty str, got {list(stop)!r}")
        self.stop = tuple(stop)
        self.longest = max((len(s) for s in self.stop), default=0)

    def find(self, text: str, new_from: int) -> int | None:
        """Index where the first stop string starts, searching only where one could newly complete."""
        start = max(0, new_from - self.longest + 1)
        hits = [i for s in self.stop if (i := text.find(s, start)) >= 0]
        return min(hits) if hits else None

    def holdback(self, text: str) -> int:
        """How many trailing characters could still be the start of a stop string (a streaming UI keeps them)."""
        for n in range(min(self.longest - 1, len(text)), 0, -1):
            if any(s.startswith(text[-n:]) for s in self.stop):
                return n
        return 0
