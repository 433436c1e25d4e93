"""Parity on byte-level BPE tokenizers trained here with HF's trainer, so the suite needs no external files.

Two pipelines: Qwen's (NFC + Split(regex, Isolated) + ByteLevel(use_regex=False), added tokens) and GPT-2's
(ByteLevel with its own regex and add_prefix_space=True).
"""

import json
import pydoc_data.topics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from corpus import CORPUS
from fs_tokenizer import Tokenizer as FsTokenizer
from fs_tokenizer.pipeline import QWEN2_PATTERN

TRAIN = list(pydoc_data.topics.topics.values())[:120] + CORPUS * 3
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def train(kind: str) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if kind == "qwen":
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(TRAIN, trainer)
    if kind == "qwen":
        tok.add_tokens(["<think>", "</think>"])
    return tok


@pytest.fixture(scope="module", params=["qwen", "gpt2"])
def pair(request, tmp_path_factory):
    hf = train(request.param)
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    hf.save(str(path))
    return FsTokenizer.from_pretrained(path), hf


def test_corpus(pair):
    ours, hf = pair
    for text in [*CORPUS, "<think>x</think><|im_end|>"]:
        assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids, text
        ids = ours.encode(text)
        assert ours.decode(ids) == hf.decode(ids, skip_special_tokens=False)
        assert ours.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)


@settings(max_examples=500, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=80))
def test_generated(pair, text):
    ours, hf = pair
    assert ours.encode(text) == hf.encode(text, add_special_tokens=False).ids


def test_merges_in_both_json_forms(pair, tmp_path):
    """tokenizers writes merges as [a, b] pairs; older files use "a b" strings. Both load the same."""
    ours, hf = pair
    spec = json.loads(hf.to_str())
    spec["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in spec["model"]["merges"]]
    (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
    legacy = FsTokenizer.from_pretrained(tmp_path / "tokenizer.json")
    assert legacy.encode(CORPUS[10]) == ours.encode(CORPUS[10])
