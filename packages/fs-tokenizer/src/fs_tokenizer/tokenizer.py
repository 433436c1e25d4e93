"""``Tokenizer``: text -> IDs -> text for byte-level BPE ``tokenizer.json`` files (Qwen2/2.5/3, GPT-2 style).

encode: carve out added tokens -> normalize -> split with the model's regex -> byte-level map -> BPE merges.
decode: IDs -> token strings -> bytes (byte-level inverse) -> UTF-8 with U+FFFD for invalid bytes.
"""

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .added import AddedSplitter, AddedToken, parse_added
from .bpe import BPE
from .bytelevel import token_bytes
from .chat import ChatTemplate
from .errors import TokenizerError
from .pipeline import PreTokenizer, build_normalizer
from .stream import StreamDecoder

UNSUPPORTED_MODEL_KEYS = {
    "dropout": None,
    "continuing_subword_prefix": ("", None),
    "end_of_word_suffix": ("", None),
    "byte_fallback": False,
}


class Tokenizer:
    def __init__(
        self,
        spec: dict[str, Any],
        config: dict[str, Any] | None = None,
        generation_config: dict[str, Any] | None = None,
        source: str = "<dict>",
    ):
        self.source = source
        try:
            self._build(spec)
        except TokenizerError as e:
            raise TokenizerError(f"{source}: {e}") from None
        self.config = config or {}
        self._eos = _eos_ids(self, self.config, generation_config or {})
        template = self.config.get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}]
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        self.chat_template = ChatTemplate(template, _special_tokens_map(self.config)) if template else None

    def _build(self, spec: dict[str, Any]) -> None:
        model = spec.get("model")
        if not isinstance(model, dict):
            raise TokenizerError("'model' is missing")
        if model.get("type", "BPE") != "BPE":
            raise TokenizerError(f"model.type {model.get('type')!r} is not supported (only BPE)")
        for key, ok in UNSUPPORTED_MODEL_KEYS.items():
            if key in model and model[key] not in (ok if isinstance(ok, tuple) else (ok,)):
                raise TokenizerError(f"model.{key}={model[key]!r} is not supported")
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not vocab:
            raise TokenizerError("model.vocab is missing or empty")
        merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
        if any(len(m) != 2 for m in merges):
            raise TokenizerError("model.merges: every merge must be a pair")
        self.bpe = BPE(vocab, merges, ignore_merges=bool(model.get("ignore_merges", False)))  # type: ignore[arg-type]
        self.normalizer = build_normalizer(spec.get("normalizer"))
        self.pre_tokenizer = PreTokenizer(spec.get("pre_tokenizer"))
        decoder = spec.get("decoder")
        if decoder is not None and decoder.get("type") != "ByteLevel":
            raise TokenizerError(f"decoder.type {decoder.get('type')!r} is not supported (only ByteLevel)")
        self.added = parse_added(spec.get("added_tokens", []))
        self._raw_split = AddedSplitter([t for t in self.added if not t.normalized])
        self._norm_split = AddedSplitter([t for t in self.added if t.normalized])
        self._id_to_token: dict[int, str] = {i: t for t, i in vocab.items()}
        self._token_to_id: dict[str, int] = dict(vocab)
        for t in self.added:
            self._id_to_token[t.id] = t.content
            self._token_to_id[t.content] = t.id
        self.special_ids = frozenset(t.id for t in self.added if t.special)
        self._bytes: dict[int, bytes] = {}

    # --- loading --------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str]) -> "Tokenizer":
        """A model directory (tokenizer.json, or vocab.json + merges.txt; plus tokenizer_config.json and
        generation_config.json when present) or a tokenizer.json file."""
        p = Path(path)
        if p.is_file():
            return cls(_load_json(p), source=str(p))
        if not p.is_dir():
            raise TokenizerError(f"{p}: no such file or directory")
        config = _load_json(p / "tokenizer_config.json") if (p / "tokenizer_config.json").exists() else {}
        if (p / "chat_template.jinja").exists():
            config = {**config, "chat_template": (p / "chat_template.jinja").read_text(encoding="utf-8")}
        gen = _load_json(p / "generation_config.json") if (p / "generation_config.json").exists() else {}
        if (p / "tokenizer.json").exists():
            return cls(_load_json(p / "tokenizer.json"), config, gen, source=str(p / "tokenizer.json"))
        if (p / "vocab.json").exists() and (p / "merges.txt").exists():
            return cls(from_vocab_merges(p / "vocab.json", p / "merges.txt", config), config, gen, source=str(p))
        raise TokenizerError(f"{p}: no tokenizer.json (nor vocab.json + merges.txt)")

    # --- encode ---------------------------------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """IDs for ``text`` exactly as HF ``tokenizers`` gives them. ``add_special_tokens`` is accepted for HF's
        signature and has no effect, as in HF for these tokenizers: Qwen2/3's post-processor is ByteLevel, which
        adds no BOS/EOS, so True and False give the same ids (test_parity_tokenizers.py checks both)."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects str, got {type(text).__name__}")
        ids: list[int] = []
        bpe, pre, norm = self.bpe.encode, self.pre_tokenizer, self.normalizer
        for segment, tid in self._raw_split.split(text):
            if tid is not None:
                ids.append(tid)
                continue
            if norm is not None:
                segment = norm(segment)
            for sub, sid in self._norm_split.split(segment):
                if sid is not None:
                    ids.append(sid)
                    continue
                try:
                    pieces = pre(sub)
                except UnicodeEncodeError as e:
                    raise TokenizerError(
                        f"text is not valid Unicode: {e.reason} at index "
                        f"{text.find(e.object[e.start])} ({e.object[e.start]!r})"
                    ) from None
                for piece in pieces:
                    ids.extend(bpe(piece))
        return ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    # --- decode ---------------------------------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        b = self._bytes.get(token_id)
        if b is None:
            tok = self._id_to_token.get(token_id) if type(token_id) is int else None
            if tok is None:
                raise TokenizerError(f"token id {token_id!r} is out of range (vocabulary: 0..{self.vocab_size - 1})")
            b = self._bytes[token_id] = token_bytes(tok)
        return b

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        out = []
        for pos, i in enumerate(ids):
            if skip_special_tokens and i in self.special_ids:
                continue
            try:
                out.append(self.token_bytes(i))
            except TokenizerError as e:
                raise TokenizerError(f"{e} at position {pos}") from None
        return b"".join(out).decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special_tokens: bool = False, unknown: str = "error") -> StreamDecoder:
        """Incremental decoder. ``unknown="replace"`` renders an id the tokenizer does not have (a model's
        padding rows: Qwen3's embedding has 151936 rows, the tokenizer 151669 ids) as U+FFFD instead of raising."""
        if unknown not in ("error", "replace"):
            raise TokenizerError(f"unknown must be 'error' or 'replace', got {unknown!r}")

        def to_bytes(i: int) -> bytes:
            if skip_special_tokens and i in self.special_ids:
                return b""
            if unknown == "replace" and i not in self._id_to_token:
                return "\ufffd".encode()
            return self.token_bytes(i)

        return StreamDecoder(to_bytes)

    # --- vocabulary -----------------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        """One past the largest token id, added tokens included (Qwen3: 151669)."""
        return max(self._id_to_token) + 1

    @property
    def bpe_size(self) -> int:
        """Size of the BPE vocabulary proper, without added tokens (Qwen3: 151643)."""
        return len(self.bpe.vocab)

    def token_to_id(self, token: str) -> int | None:
        return self._token_to_id.get(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self._id_to_token.get(token_id)

    @property
    def added_tokens(self) -> list[AddedToken]:
        return list(self.added)

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos

    @property
    def eos_token_id(self) -> int | None:
        return self._eos[0] if self._eos else None

    # --- chat -----------------------------------------------------------------------------------------------

    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        *,
        tokenize: bool = False,
        add_generation_prompt: bool = False,
        enable_thinking: bool = True,
        tools: Sequence[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Render the model's own Jinja chat template as ``transformers`` does; ``tokenize=True`` -> IDs."""
        if self.chat_template is None:
            raise TokenizerError(f"{self.source}: no chat_template in tokenizer_config.json")
        text = self.chat_template.render(
            messages,
            add_generation_prompt=add_generation_prompt,
            enable_thinking=enable_thinking,
            tools=tools,
            **kwargs,
        )
        return self.encode(text) if tokenize else text


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TokenizerError(f"{path}: not readable JSON: {e}") from None


def from_vocab_merges(vocab_path: Path, merges_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """A ``tokenizer.json``-shaped spec from the slow-tokenizer pair, with Qwen2's pipeline and the added
    tokens listed in tokenizer_config.json's ``added_tokens_decoder``."""
    from .pipeline import QWEN2_PATTERN

    lines = merges_path.read_text(encoding="utf-8").splitlines()
    merges = [ln for ln in lines if ln and not ln.startswith("#version")]
    added = [{"id": int(i), **t} for i, t in config.get("added_tokens_decoder", {}).items()]
    return {
        "model": {"type": "BPE", "vocab": _load_json(vocab_path), "merges": merges},
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
            ],
        },
        "decoder": {"type": "ByteLevel"},
        "added_tokens": added,
    }


def _special_tokens_map(config: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        v = config.get(key)
        v = v.get("content") if isinstance(v, dict) else v
        if isinstance(v, str):
            out[key] = v
    return out


def _eos_ids(tok: Tokenizer, config: dict[str, Any], gen: dict[str, Any]) -> tuple[int, ...]:
    ids: list[int] = []
    g = gen.get("eos_token_id")
    for i in g if isinstance(g, list) else [g] if g is not None else []:
        if isinstance(i, int) and i not in ids:
            ids.append(i)
    eos = _special_tokens_map(config).get("eos_token")
    if eos is not None and (i := tok.token_to_id(eos)) is not None and i not in ids:
        ids.append(i)
    return tuple(ids)
