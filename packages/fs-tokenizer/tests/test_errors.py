import json

import pytest

from fs_tokenizer import Tokenizer, TokenizerError

BASE = {
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": ["a b"]},
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
    "decoder": {"type": "ByteLevel"},
    "added_tokens": [{"id": 4, "content": "<s>", "special": True}],
}


def mutate(**changes):
    spec = json.loads(json.dumps(BASE))
    for path, value in changes.items():
        *keys, last = path.split("__")
        d = spec
        for k in keys:
            d = d[k]
        if value is ...:
            del d[last]
        else:
            d[last] = value
    return spec


def test_base_spec_works():
    tok = Tokenizer(BASE)
    assert tok.encode("ab<s>a") == [2, 4, 0] and tok.decode([2, 4]) == "ab<s>"


@pytest.mark.parametrize(
    "changes,words",
    [
        (dict(model__vocab=...), "model.vocab is missing"),
        (dict(model__merges=["a c"]), "merge #0 'a' \\+ 'c' names 'c'"),
        (dict(model__type="WordPiece"), "model.type 'WordPiece'"),
        (dict(model__byte_fallback=True), "model.byte_fallback=True is not supported"),
        (dict(model__dropout=0.1), "model.dropout"),
        (dict(normalizer={"type": "Precompiled"}), "unsupported normalizer type 'Precompiled'"),
        (
            dict(
                pre_tokenizer={
                    "type": "Sequence",
                    "pretokenizers": [
                        {"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": False},
                        {"type": "ByteLevel", "use_regex": False},
                    ],
                }
            ),
            r"pre_tokenizer.pretokenizers\[0\]: bad regex",
        ),
        (dict(pre_tokenizer={"type": "Whitespace"}), "unsupported pre-tokenizer type 'Whitespace'"),
        (dict(pre_tokenizer={"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Removed"}), "behavior 'Removed'"),
        (dict(decoder={"type": "WordPiece"}), "decoder.type 'WordPiece'"),
        (dict(added_tokens=[{"content": "x"}]), r"added_tokens\[0\]"),
        (dict(model=...), "'model' is missing"),
    ],
)
def test_malformed_tokenizer_json_names_the_field(changes, words):
    with pytest.raises(TokenizerError, match=words):
        Tokenizer(mutate(**changes), source="tok.json")


def test_bad_inputs():
    tok = Tokenizer(BASE)
    with pytest.raises(TokenizerError, match="encode expects str, got bytes"):
        tok.encode(b"ab")  # type: ignore[arg-type]
    with pytest.raises(TokenizerError, match="token id 99 is out of range .* at position 1"):
        tok.decode([0, 99])
    with pytest.raises(TokenizerError, match="token id -1 is out of range"):
        tok.decode([-1])
    with pytest.raises(TokenizerError, match="not valid Unicode.*index 1"):
        tok.encode("a\ud800b")
    assert tok.decode([3, 0]) == " a"


def test_invalid_utf8_from_decoding_is_replaced_not_raised(qwen3):
    half = qwen3.encode("𝔘")[:1]
    assert qwen3.decode(half + qwen3.encode("x")) == "\ufffdx"


def test_files(tmp_path, qwen3_dir):
    with pytest.raises(TokenizerError, match="no such file"):
        Tokenizer.from_pretrained(tmp_path / "nope")
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        Tokenizer.from_pretrained(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{oops")
    with pytest.raises(TokenizerError, match="not valid JSON"):
        Tokenizer.from_pretrained(tmp_path)


def test_vocab_json_and_merges_txt_pair(tmp_path, qwen3_dir, qwen3):
    for f in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (tmp_path / f).write_bytes((qwen3_dir / f).read_bytes())
    pair = Tokenizer.from_pretrained(tmp_path)
    text = "Hello, world! <|im_start|>中文 don't 123"
    assert pair.encode(text) == qwen3.encode(text) and pair.vocab_size == qwen3.vocab_size
