"""``Tokenizer``: text -> IDs -> text for byte-level BPE ``tokenizer.json`` files (Qwen2/2.5/3, GPT-2 style).

encode: carve out added tokens -> normalize -> split with the model's regex -> byte-level map -> BPE merges.
decode: IDs -> token strings -> bytes (byte-level inverse) -> UTF-8 with U+FFFD for invalid bytes.
"""

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from .added import AddedSplitter, AddedToken, parse_added
from .bpe import BPE
from .bytelevel import token_bytes
from .chat import ChatTemplate
from .errors import TokenizerError
from .gguf_vocab import spec_from_gguf
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
        self.spec = spec
        # what this tokenizer is: SHA-256 of the files it was read from (set by from_pretrained; "" for a dict), or
        # of a GGUF file's vocabulary fields, hashed when first asked (0.5 s for Qwen3's: most loads never ask)
        self._digest: str | Callable[[], str] = ""
        try:
            self._build(spec)
        except TokenizerError as e:
            raise TokenizerError(f"{source}: {e}") from None
        except RecursionError:
            raise TokenizerError(f"{source}: normalizer / pre_tokenizer nested too deeply") from None
        self.config = config or {}
        if not isinstance(self.config, dict) or not isinstance(generation_config or {}, dict):
            raise TokenizerError(f"{source}: tokenizer_config / generation_config must be JSON objects")
        self._eos = _eos_ids(self, self.config, generation_config or {})
        template = _chat_template(self.config)
        self.chat_template = ChatTemplate(template, _special_tokens_map(self.config)) if template else None

    def _build(self, spec: dict[str, Any]) -> None:
        if not isinstance(spec, dict):
            raise TokenizerError(f"the top level must be a JSON object, got {type(spec).__name__}")
        model = spec.get("model")
        if not isinstance(model, dict):
            raise TokenizerError("'model' is missing or not an object")
        if model.get("type", "BPE") != "BPE":
            raise TokenizerError(f"model.type {model.get('type')!r} is not supported (only BPE)")
        for key, ok in UNSUPPORTED_MODEL_KEYS.items():
            if key in model and model[key] not in (ok if isinstance(ok, tuple) else (ok,)):
                raise TokenizerError(f"model.{key}={model[key]!r} is not supported")
        vocab = model.get("vocab")
        if not isinstance(vocab, dict) or not vocab:
            raise TokenizerError("model.vocab is missing or empty")
        bad = next(((t, i) for t, i in vocab.items() if type(i) is not int or i < 0), None)
        if bad is not None:
            raise TokenizerError(f"model.vocab[{bad[0]!r}] must be a non-negative int id, got {bad[1]!r}")
        self.bpe = BPE(vocab, _merges(model.get("merges", [])), ignore_merges=model.get("ignore_merges") is True)
        self.normalizer = build_normalizer(spec.get("normalizer"))
        self.pre_tokenizer = PreTokenizer(spec.get("pre_tokenizer"))
        decoder = spec.get("decoder")
        if decoder is not None and not isinstance(decoder, dict):
            raise TokenizerError(f"decoder must be an object, got {type(decoder).__name__} {decoder!r:.60}")
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
        self._vocab_size = max(self._id_to_token, default=-1) + 1  # once: a max over 151k ids costs ~2 ms a call

    # --- loading --------------------------------------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str]) -> "Tokenizer":
        """A model directory (tokenizer.json, or vocab.json + merges.txt; plus tokenizer_config.json and
        generation_config.json when present) or a tokenizer.json file."""
        p = Path(path)
        if p.is_file() and p.suffix == ".gguf":
            raise TokenizerError(
                f"{p}: a GGUF file; its tokenizer is Tokenizer.from_gguf_metadata(fs_weights.GGUFFile(path).metadata)"
            )
        if p.is_file():
            return _digested(cls(load_json(p, dict), source=str(p)), [p])
        if not p.is_dir():
            raise TokenizerError(f"{p}: no such file or directory")
        config = load_json(p / "tokenizer_config.json", dict) if (p / "tokenizer_config.json").exists() else {}
        if (p / "chat_template.jinja").exists():
            config = {**config, "chat_template": _read_text(p / "chat_template.jinja")}
        gen = load_json(p / "generation_config.json", dict) if (p / "generation_config.json").exists() else {}
        extra = [p / n for n in ("tokenizer_config.json", "chat_template.jinja", "generation_config.json")]
        if (p / "tokenizer.json").exists():
            tok = cls(load_json(p / "tokenizer.json", dict), config, gen, source=str(p / "tokenizer.json"))
            return _digested(tok, [p / "tokenizer.json", *extra])
        if (p / "vocab.json").exists() and (p / "merges.txt").exists():
            tok = cls(from_vocab_merges(p / "vocab.json", p / "merges.txt", config), config, gen, source=str(p))
            return _digested(tok, [p / "vocab.json", p / "merges.txt", *extra])
        raise TokenizerError(f"{p}: no tokenizer.json (nor vocab.json + merges.txt)")

    @classmethod
    def from_gguf_metadata(cls, meta: dict[str, Any], source: str = "<gguf>") -> "Tokenizer":
        """The vocabulary a GGUF file carries, from its metadata fields (``gguf_vocab``)."""
        spec, config, gen = spec_from_gguf(meta, source)
        tok = cls(spec, config, gen, source=source)
        tok._digest = lambda: hashlib.sha256(json.dumps([spec, config, gen], sort_keys=True).encode()).hexdigest()
        return tok

    @property
    def digest(self) -> str:
        if callable(self._digest):
            self._digest = self._digest()
        return self._digest

    @digest.setter
    def digest(self, value: str) -> None:
        self._digest = value

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
        if isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__"):  # decode(None), decode(5), decode("ab")
            raise TokenizerError(f"decode takes a sequence of token ids, got {type(ids).__name__}")
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

    def to_json(self) -> str:
        """The tokenizer.json this tokenizer was built from (for vocab.json + merges.txt, the equivalent one), as
        JSON text: what another library given "the same tokenizer" loads (llguidance's token masks)."""
        return json.dumps(self.spec, ensure_ascii=False)

    @property
    def vocab_size(self) -> int:
        """One past the largest token id, added tokens included (Qwen3: 151669)."""
        return self._vocab_size

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


def _merges(raw: Any) -> list[tuple[str, str]]:
    """``merges`` as ``"a b"`` strings (older files) or ``["a", "b"]`` pairs (newer ones)."""
    if not isinstance(raw, list):
        raise TokenizerError(f"model.merges must be a list, got {type(raw).__name__}")
    out = []
    for i, m in enumerate(raw):
        pair = m.split(" ", 1) if isinstance(m, str) else m
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and x for x in pair)):
            raise TokenizerError(f"model.merges[{i}] must be 'a b' or ['a', 'b'], got {m!r}")
        out.append((pair[0], pair[1]))
    return out


def load_json(path: Path, expect: type = object) -> Any:
    """A JSON file as fs-tokenizer reads them all: UTF-8 (byte offset named), syntax (line and column named),
    nesting bounded (Python's parser recurses per level: ``[[[[...]]]]`` is a ``RecursionError`` otherwise) and,
    with ``expect``, the top-level type checked. Every failure is a ``TokenizerError`` naming the file."""
    try:
        data = path.read_bytes()
    except (OSError, ValueError) as e:
        raise TokenizerError(f"{path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    return parse_json(data, str(path), expect)


def parse_json(data: bytes, source: str, expect: type = object) -> Any:
    """``load_json`` for bytes already read (``source`` names where they came from, e.g. ``<stdin>``)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{source}: not valid UTF-8 (byte offset {e.start})") from None
    except RecursionError:
        raise TokenizerError(f"{source}: JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise TokenizerError(f"{source}: not valid JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    if not isinstance(value, expect):
        raise TokenizerError(f"{source}: the top level must be a JSON {expect.__name__}, got {type(value).__name__}")
    return value


def from_vocab_merges(vocab_path: Path, merges_path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """A ``tokenizer.json``-shaped spec from the slow-tokenizer pair, with Qwen2's pipeline and the added
    tokens listed in tokenizer_config.json's ``added_tokens_decoder``."""
    from .pipeline import QWEN2_PATTERN

    lines = _read_text(merges_path).splitlines()
    merges = [ln for ln in lines if ln and not ln.startswith("#version")]
    decoder = config.get("added_tokens_decoder", {})
    if not isinstance(decoder, dict) or not all(isinstance(t, dict) and i.isdigit() for i, t in decoder.items()):
        raise TokenizerError("tokenizer_config.json: 'added_tokens_decoder' must map id strings to token objects")
    added = [{"id": int(i), **t} for i, t in decoder.items()]
    return {
        "model": {"type": "BPE", "vocab": load_json(vocab_path, dict), "merges": merges},
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


def _digested(tok: Tokenizer, files: list[Path]) -> Tokenizer:
    h = hashlib.sha256()
    for f in files:
        if f.exists():
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    tok.digest = h.hexdigest()
    return tok


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise TokenizerError(f"{path}: not valid UTF-8 (byte offset {e.start})") from None
    except OSError as e:
        raise TokenizerError(f"{path}: cannot read: {e.strerror or e}") from None


def _chat_template(config: dict[str, Any]) -> str | None:
    """``chat_template``: a string, or HF's list of named templates (``default`` is used)."""
    template = config.get("chat_template")
    if isinstance(template, list):  # [{"name": ..., "template": ...}]
        entries = [t for t in template if isinstance(t, dict) and isinstance(t.get("name"), str)]
        named = {t["name"]: t.get("template") for t in entries}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise TokenizerError(f"tokenizer_config.json: 'chat_template' must be a string, got {type(template).__name__}")
    return template or None


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
