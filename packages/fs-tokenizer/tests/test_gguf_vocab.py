"""The GGUF form of a vocabulary (llama.cpp's parallel arrays) and back: the rebuilt tokenizer encodes, decodes
and templates exactly as the tokenizer.json it came from."""

import pytest

from corpus import CORPUS
from fs_tokenizer import Tokenizer, TokenizerError
from fs_tokenizer.gguf_vocab import CONTROL, UNUSED, USER_DEFINED, gguf_fields


def test_the_round_trip_encodes_the_corpus_identically(qwen3):
    fields = gguf_fields(qwen3, 151936)  # the model's padded vocabulary: ids past the tokenizer are [PADn]
    assert fields["tokenizer.ggml.token_type"][-1] == UNUSED and fields["tokenizer.ggml.tokens"][-1] == "[PAD151935]"
    back = Tokenizer.from_gguf_metadata(fields, source="test.gguf")
    for text in CORPUS:
        assert back.encode(text) == qwen3.encode(text), text
        assert back.decode(qwen3.encode(text)) == qwen3.decode(qwen3.encode(text))
    msgs = [{"role": "user", "content": "hi"}]
    assert back.apply_chat_template(msgs, add_generation_prompt=True) == qwen3.apply_chat_template(
        msgs, add_generation_prompt=True)  # fmt: skip
    assert back.eos_token_id == qwen3.eos_token_id and back.vocab_size == qwen3.vocab_size


def test_special_and_plain_added_tokens_keep_their_kind(qwen3):
    fields = gguf_fields(qwen3, 151936)
    types, tokens = fields["tokenizer.ggml.token_type"], fields["tokenizer.ggml.tokens"]
    assert types[tokens.index("<|im_end|>")] == CONTROL and types[tokens.index("<think>")] == USER_DEFINED
    back = Tokenizer.from_gguf_metadata(fields)
    ids = back.encode("<think>x</think><|im_end|>")
    assert back.decode(ids, skip_special_tokens=True) == "<think>x</think>"  # only <|im_end|> is special


@pytest.mark.parametrize(
    "change, words",
    [
        ({"tokenizer.ggml.model": "llama"}, "only byte-level BPE"),
        ({"tokenizer.ggml.pre": "llama-bpe"}, "not a pre-tokenizer known here"),
        ({"tokenizer.ggml.token_type": [1]}, "different lengths"),
    ],
)
def test_what_cannot_be_rebuilt_is_refused_by_name(qwen3, change, words):
    with pytest.raises(TokenizerError, match=words):
        Tokenizer.from_gguf_metadata(gguf_fields(qwen3, 151936) | change, source="m.gguf")
