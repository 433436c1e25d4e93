import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

SPLIT_CHARS = ["😀", "👨‍👩‍👧‍👦", "🏳️‍🌈", "中文", "日本語", "한국어", "é", "🇯🇵", "ஹ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢"]


def stream(tok, ids, **kw):
    dec = tok.stream_decoder(**kw)
    parts = [dec.push(i) for i in ids]
    return parts, dec.flush()


@pytest.mark.parametrize("text", [*SPLIT_CHARS, "a😀b中c", "Hello 👋🏽 世界!"])
def test_no_partial_characters_and_total_equals_decode(qwen3, text):
    ids = qwen3.encode(text)
    parts, tail = stream(qwen3, ids)
    assert "".join(parts) + tail == qwen3.decode(ids) == text
    assert tail == ""
    assert all("\ufffd" not in p for p in parts)  # nothing was emitted half-done
    prefix = ""
    for p in parts:  # every prefix of the stream is a prefix of the final text
        prefix += p
        assert text.startswith(prefix)


def test_multibyte_split_is_held_back(qwen3):
    ids = qwen3.encode("𝔘")
    assert [qwen3.token_bytes(i) for i in ids] == [b"\xf0\x9d\x94", b"\x98"]  # one character, two tokens
    dec = qwen3.stream_decoder()
    assert dec.push(ids[0]) == ""
    assert dec.push(ids[1]) == "𝔘"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 151668), max_size=20))
def test_random_ids_concatenate_to_decode_even_when_invalid(qwen3, ids):
    parts, tail = stream(qwen3, ids)
    assert "".join(parts) + tail == qwen3.decode(ids)
    parts, tail = stream(qwen3, ids, skip_special_tokens=True)
    assert "".join(parts) + tail == qwen3.decode(ids, skip_special_tokens=True)


def test_incomplete_tail_becomes_replacement_at_flush(qwen3):
    ids = qwen3.encode("a𝔘")[:-1]
    parts, tail = stream(qwen3, ids)
    assert "".join(parts) == "a" and tail == "\ufffd" and "".join(parts) + tail == qwen3.decode(ids)


def test_random_text_streams(qwen3):
    rng = random.Random(0)
    for _ in range(50):
        text = "".join(rng.choice([*SPLIT_CHARS, " ", "a", "\n"]) for _ in range(20))
        ids = qwen3.encode(text)
        parts, tail = stream(qwen3, ids)
        assert "".join(parts) + tail == text


def test_ids_past_the_tokenizer_vocabulary(qwen3):
    from fs_tokenizer import TokenizerError

    with pytest.raises(TokenizerError, match="151900 is out of range"):
        qwen3.stream_decoder().push(151900)
    dec = qwen3.stream_decoder(unknown="replace")
    assert dec.push(9707) + dec.push(151900) + dec.flush() == "Hello\ufffd"
