"""The demo model shipped with fs-generate: a real Qwen3 directory that learned its corpus."""

import json
import math
import pydoc_data.topics

import numpy as np
import pytest

from fs_generate import generate, load
from fs_generate.cli import main
from fs_generate.demo import DEMO_MODEL
from fs_weights import Checkpoint, cross_check, load_config

META = json.loads((DEMO_MODEL / "TRAINING.json").read_text())
KEYS = sorted(pydoc_data.topics.topics)
HELD = [pydoc_data.topics.topics[k] for i, k in enumerate(KEYS) if i % 20 == 7]  # the training script's split
TRAIN = [pydoc_data.topics.topics[k] for i, k in enumerate(KEYS) if i % 20 != 7]


@pytest.fixture(scope="module")
def demo():
    return load(None)


def test_a_complete_small_qwen3_directory(demo):
    model, tok = demo
    files = {p.name for p in DEMO_MODEL.iterdir()}
    assert {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    } <= files
    assert sum(p.stat().st_size for p in DEMO_MODEL.iterdir()) <= 10 * 2**20
    ck = Checkpoint.open(DEMO_MODEL)
    report = cross_check(load_config(DEMO_MODEL), ck, strict=True)
    assert report.dtypes == {"BF16": len(ck)} and report.parameters == META["parameters"]
    assert tok.vocab_size == model.config.vocab_size == 4096
    assert next(t.id for t in tok.added_tokens) == 4096 - 9  # special tokens at the top of the vocabulary
    assert (
        tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
        == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_it_learned_held_out_perplexity_far_below_unigram(demo):
    model, tok = demo
    eot = tok.token_to_id("<|endoftext|>")
    train = np.concatenate([[*tok.encode(t), eot] for t in TRAIN])
    held = np.concatenate([[*tok.encode(t), eot] for t in HELD])
    counts = np.bincount(train, minlength=tok.vocab_size) + 1.0
    unigram = math.exp(-np.mean(np.log(counts[held] / counts.sum())))
    nll, n = 0.0, 0
    for i in range(0, len(held) - 257, 256):
        window = held[i : i + 257]
        logits = model.forward(window[:-1].tolist()).astype(np.float64)
        logp = logits - logits.max(-1, keepdims=True)
        logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
        nll -= logp[np.arange(256), window[1:]].sum()
        n += 256
    ppl = math.exp(nll / n)
    assert abs(unigram - META["unigram_held_out_perplexity"]) < 1e-6 * unigram
    assert ppl < unigram / 4, (ppl, unigram)
    assert abs(ppl - META["held_out_perplexity"]) / META["held_out_perplexity"] < 0.1  # bf16 export vs f32 training


def test_greedy_continuations_reproduce_corpus_phrases(demo):
    """Given 96 tokens of a training topic, greedy decoding continues with the corpus's own next words. (From a
    few words alone it drifts: training windows start at random offsets, so short contexts are rare.)"""
    model, tok = demo
    hits, samples = 0, []
    for text in TRAIN[::8]:
        ids = tok.encode(text)
        if len(ids) < 128:
            continue
        got = generate(model, tok, ids[:96], max_new_tokens=12, eos_token_ids=[]).token_ids
        hits += got == ids[96:108]
        samples.append((tok.decode(ids[80:96]), tok.decode(got)))
    assert len(samples) >= 8 and hits >= 2 * len(samples) // 3, (hits, samples)


def test_cli_with_only_a_prompt(capsys):
    assert main(["--prompt", "The with statement", "--max-tokens", "12"]) == 0
    out, err = capsys.readouterr()
    assert "Using the tiny demo model" in err and "--model Qwen/Qwen3-0.6B" in err and out.strip()


@pytest.mark.parity
@pytest.mark.parametrize("backend", ["numpy", "mlx"])
def test_greedy_ids_equal_mlx_lm_on_real_text(reference, backend):
    mx = reference("mlx.core")
    mlx_lm = reference("mlx_lm")
    from mlx_lm.generate import generate_step

    ref_model, ref_tok = mlx_lm.load(str(DEMO_MODEL))
    ref_model.set_dtype(mx.float32)  # same bf16 weights, both sides computing in float32
    model, tok = load(None, backend=backend, dtype="float32" if backend == "mlx" else None)
    for prompt in ("The with statement", "Assignment statements are used to", "class Foo:\n    def"):
        ids = tok.encode(prompt)
        assert ref_tok.encode(prompt) == ids
        want = [int(step[0]) for step in generate_step(mx.array(ids), ref_model, max_tokens=24)]
        got = generate(model, tok, ids, max_new_tokens=24, eos_token_ids=[]).token_ids
        assert got == want, prompt
