"""Added tokens (``<|im_end|>``, ``<think>``, ...): carved out of the text before pre-tokenization.

Matching is leftmost, longest first, as HF's AddedVocabulary does: tokens marked ``normalized: false`` are
found in the raw text, the others in the normalized text of the segments in between.
"""

from dataclasses import dataclass

import regex

from .errors import TokenizerError


@dataclass(frozen=True)
class AddedToken:
    id: int
    content: str
    special: bool = False
    normalized: bool = False
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False


def parse_added(entries: object) -> list[AddedToken]:
    if not isinstance(entries, list):
        raise TokenizerError("added_tokens: expected a list")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or type(e.get("id")) is not int or not isinstance(e.get("content"), str):
            raise TokenizerError(f"added_tokens[{i}]: needs an int 'id' and a str 'content', got {e!r}")
        flags = [k for k in ("special", "normalized", "lstrip", "rstrip", "single_word") if k in e]
        if any(not isinstance(e[k], bool) for k in flags):
            raise TokenizerError(f"added_tokens[{i}]: flags {flags} must be true or false, got {e!r}")
        if e["id"] < 0:
            raise TokenizerError(f"added_tokens[{i}]: negative id {e['id']}")
        if not e["content"]:
            raise TokenizerError(f"added_tokens[{i}]: empty content")
        out.append(
            AddedToken(
                e["id"],
                e["content"],
                bool(e.get("special")),
                bool(e.get("normalized")),
                bool(e.get("lstrip")),
                bool(e.get("rstrip")),
                bool(e.get("single_word")),
            )
        )
    return out


class AddedSplitter:
    """Splits text into (segment, None) and (content, token id) runs."""

    def __init__(self, tokens: list[AddedToken]):
        self.ids = {t.content: t.id for t in tokens}
        self.pattern = self._compile(tokens)

    @staticmethod
    def _compile(tokens: list[AddedToken]) -> regex.Pattern[str] | None:
        if not tokens:
            return None
        alts = []
        for t in sorted(tokens, key=lambda t: len(t.content), reverse=True):
            p = regex.escape(t.content)
            if t.single_word:
                p = rf"(?<![\w]){p}(?![\w])"
            ws = r"\s*"
            alts.append((ws if t.lstrip else "") + rf"(?P<t{t.id}>{p})" + (ws if t.rstrip else ""))
        return regex.compile("|".join(alts))

    def split(self, text: str) -> list[tuple[str, int | None]]:
        if self.pattern is None or not text:
            return [(text, None)] if text else []
        out: list[tuple[str, int | None]] = []
        end = 0
        for m in self.pattern.finditer(text):
            if m.start() > end:
                out.append((text[end : m.start()], None))
            name = m.lastgroup or ""
            out.append((m.group(name), int(name[1:])))
            end = m.end()
        if end < len(text):
            out.append((text[end:], None))
        return out
