"""Normalizer and pre-tokenizer from ``tokenizer.json``: text -> list of byte-level pre-tokens.

Supported (everything Qwen2/2.5/3 and GPT-2-style byte-level BPE files use): normalizers NFC/NFD/NFKC/NFKD,
Lowercase, Sequence; pre-tokenizers Split (Isolated, not inverted), ByteLevel, Sequence. Anything else is a
``TokenizerError`` naming the field, never silently different IDs.
"""

import unicodedata
from collections.abc import Callable
from typing import Any

import regex

from .bytelevel import to_bytelevel
from .errors import TokenizerError

QWEN2_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"""
    r"""\s+(?!\S)|\s+"""
)
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

Normalizer = Callable[[str], str]


def build_normalizer(spec: dict[str, Any] | None, where: str = "normalizer") -> Normalizer | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise TokenizerError(f"{where}: must be an object with a 'type', got {type(spec).__name__} {spec!r:.60}")
    kind = spec.get("type")
    if kind in ("NFC", "NFD", "NFKC", "NFKD"):
        form = kind
        return lambda s: unicodedata.normalize(form, s)
    if kind == "Lowercase":
        return str.lower
    if kind == "Sequence":
        if not isinstance(spec.get("normalizers"), list):
            raise TokenizerError(f"{where}: Sequence without a 'normalizers' list")
        steps = [build_normalizer(s, f"{where}.normalizers[{i}]") for i, s in enumerate(spec["normalizers"])]
        fns = [f for f in steps if f is not None]

        def chain(s: str) -> str:
            for f in fns:
                s = f(s)
            return s

        return chain
    raise TokenizerError(
        f"{where}: unsupported normalizer type {kind!r} (supported: NFC, NFD, NFKC, NFKD, Lowercase, Sequence)"
    )


class PreTokenizer:
    """Splits normalized text into pieces and maps each piece to byte-level characters."""

    def __init__(self, spec: dict[str, Any] | None):
        self.split: regex.Pattern[str] | None = None
        self.prefix_space = False
        self.bytelevel = False
        for where, step in _flatten(spec, "pre_tokenizer"):
            kind = step.get("type")
            if kind == "Split":
                pattern = step.get("pattern", {})
                given = pattern if isinstance(pattern, dict) else {}
                if isinstance(given.get("Regex"), str):
                    source = given["Regex"]
                elif isinstance(given.get("String"), str):
                    source = regex.escape(given["String"])
                else:
                    raise TokenizerError(f"{where}: Split 'pattern' must be {{'Regex': str}} or {{'String': str}}")
                if step.get("behavior") != "Isolated" or step.get("invert"):
                    raise TokenizerError(
                        f"{where}: Split behavior {step.get('behavior')!r} / invert="
                        f"{step.get('invert')!r} is not supported (only Isolated, not inverted)"
                    )
                self._set_split(where, source)
            elif kind == "ByteLevel":
                self.bytelevel = True
                self.prefix_space = bool(step.get("add_prefix_space", False))
                if step.get("use_regex", True):
                    self._set_split(where, GPT2_PATTERN)
            else:
                raise TokenizerError(
                    f"{where}: unsupported pre-tokenizer type {kind!r} (supported: Split, ByteLevel, Sequence)"
                )
        if not self.bytelevel:
            raise TokenizerError("pre_tokenizer: no ByteLevel step; only byte-level BPE tokenizers are supported")

    def _set_split(self, where: str, pattern: str) -> None:
        if self.split is not None:
            raise TokenizerError(f"{where}: a second splitting regex is not supported")
        try:
            self.split = regex.compile(pattern)
        except regex.error as e:
            raise TokenizerError(f"{where}: bad regex {pattern!r}: {e}") from None

    def __call__(self, text: str) -> list[str]:
        if self.prefix_space and text and not text.startswith(" "):
            text = " " + text
        if self.split is None:
            return [to_bytelevel(text)] if text else []
        pieces, end = [], 0
        for m in self.split.finditer(text):
            if m.start() > end:  # text no alternative matched is its own piece (Isolated keeps it)
                pieces.append(to_bytelevel(text[end : m.start()]))
            if m.end() > m.start():
                pieces.append(to_bytelevel(m.group()))
            end = m.end()
        if end < len(text):
            pieces.append(to_bytelevel(text[end:]))
        return pieces


def _flatten(spec: dict[str, Any] | None, where: str) -> list[tuple[str, dict[str, Any]]]:
    if spec is None:
        return []
    if not isinstance(spec, dict):
        raise TokenizerError(f"{where}: must be an object with a 'type', got {type(spec).__name__} {spec!r:.60}")
    if spec.get("type") == "Sequence":
        steps = spec.get("pretokenizers")
        if not isinstance(steps, list):
            raise TokenizerError(f"{where}: Sequence without a 'pretokenizers' list")
        return [x for i, s in enumerate(steps) for x in _flatten(s, f"{where}.pretokenizers[{i}]")]
    return [(where, spec)]
