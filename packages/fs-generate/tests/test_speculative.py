"""Prompt-lookup speculative decoding (speculative.py): on the batch-invariant kernels every output equals plain
``generate`` bit for bit - token ids, logprobs, text, finish reason - for greedy and seeded sampling, with EOS,
stop strings and budgets landing inside an accepted run, and the caches end where a plain run's do."""

import numpy as np
import pytest

from fs_generate import GenerateError, generate, load
from fs_generate.generate import Generator
from fs_generate.speculative import lookup

FORMATS = {"bf16": {"dtype": "bfloat16"}, "int4": {"quantize": "int4"}}


def test_lookup_copies_what_followed_the_latest_longest_match():
    seq = [1, 2, 3, 9, 1, 2, 3, 7, 8, 5, 2, 3]
    assert lookup(seq, 3) == [7, 8, 5]  # "2 3" (no "5 2 3" before): its latest occurrence, at 5..6
    assert lookup([4, 5, 6, 4, 5, 6, 4, 5], 2) == [6, 4]  # "6 4 5" occurred at 2..4, followed by 6, 4
    assert lookup([1, 2, 3], 4) == [] and lookup([7], 2) == []  # no earlier occurrence, too short


@pytest.fixture(scope="module")
def models(tiny_dir):
    from fs_model import cpu

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    return {name: load(str(tiny_dir), **kw) for name, kw in FORMATS.items()}


def prompts(tok):
    rng = np.random.default_rng(11)
    motif = rng.integers(0, 150000, 12).tolist()
    return [motif * 3 + motif[:4], tok.encode("def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return")]


def drafter(prompt, want, wrong_every=0):
    """Drafts from the plain run itself (``want``: its token ids) - all right, or every ``wrong_every``-th one off by
    one - in place of prompt lookup, whose drafts a random model rarely confirms: the verifying, the rollback after
    a rejection and the bookkeeping then run on most tokens."""

    def draft(seq, k):
        at = len(seq) - len(prompt)  # seq ends with the pending token: the drafts are the tokens after it
        out = list(want[at : at + k])
        return [t + 1 if wrong_every and (at + j) % wrong_every == 0 else t for j, t in enumerate(out)]

    return draft


@pytest.mark.kernels
@pytest.mark.parametrize("fmt", ["bf16", "int4"])  # int8: the same invariant glue (test_batch_invariance.py)
def test_outputs_equal_plain_decoding_bit_for_bit(models, fmt, monkeypatch):
    from fs_generate import speculative

    model, tok = models[fmt]
    p = prompts(tok)[0]
    for kw in (dict(), dict(temperature=0.8, top_p=0.9, seed=5, repetition_penalty=1.2)):
        want = generate(model, tok, p, max_new_tokens=20, eos_token_ids=[], **kw)
        for wrong_every, k in ((0, 8), (3, 4), (None, 1), (None, 5)):  # None: prompt lookup itself
            with monkeypatch.context() as m:
                if wrong_every is not None:
                    m.setattr(speculative, "lookup", drafter(p, want.token_ids, wrong_every))
                got = generate(model, tok, p, max_new_tokens=20, eos_token_ids=[], prompt_lookup_num_tokens=k, **kw)
            assert (got.token_ids, got.logprobs, got.text, got.finish_reason) == (
                want.token_ids, want.logprobs, want.text, want.finish_reason), (kw, wrong_every, k)  # fmt: skip
            assert got.accepted_tokens <= got.drafted_tokens
            if wrong_every == 0:  # right drafts: all but the first token and one per pass come from them
                assert got.accepted_tokens >= 20 - 1 - got.forward_passes and got.forward_passes <= 2 + 19 // k


@pytest.mark.kernels
@pytest.mark.parametrize(
    "cache_kw",
    [dict(kv_bits=8, kv_group_size=32), dict(kv_bits=4, kv_group_size=32, quantized_kv_start=47), dict(max_kv_size=49)],
    ids=["kv8-from-the-prompt", "kv4-from-47", "window-49"],
)
def test_a_quantized_or_rotating_cache_gives_the_plain_bits(models, cache_kw, monkeypatch):
    """The 40-token prompt, 24 tokens: a cache quantized from the prompt on, one quantized once it holds 47
    positions (a plain run's rows before that read exact K/V, after it codes: no pass may straddle it), and a
    48-position window that fills at 49 and then drops positions (no pass may then hold more than one row)."""
    from fs_generate import speculative

    model, tok = models["bf16"]
    p = prompts(tok)[0]
    kw = dict(max_new_tokens=24, eos_token_ids=[], **cache_kw)
    want = generate(model, tok, p, **kw)
    for wrong_every, k in ((0, 8), (3, 4)):
        monkeypatch.setattr(speculative, "lookup", drafter(p, want.token_ids, wrong_every))
        steps = list(Generator(model, tok, p, prompt_lookup_num_tokens=k, **kw).steps())
        assert [s.token_id for s in steps] == want.token_ids and [s.logprob for s in steps] == want.logprobs
        drafted = [i for i, s in enumerate(steps) if s.from_draft]
        assert drafted and (drafted[-1] > 10 if "kv_bits" in cache_kw else drafted[-1] < 10), drafted


@pytest.mark.kernels
def test_stops_inside_an_accepted_run_and_the_caches_end_as_plain(models, monkeypatch):
    from fs_generate import speculative

    model, tok = models["bf16"]
    p = prompts(tok)[1]
    plain = generate(model, tok, p, max_new_tokens=24, eos_token_ids=[])
    monkeypatch.setattr(speculative, "lookup", drafter(p, plain.token_ids))
    steps = list(Generator(model, tok, p, max_new_tokens=24, eos_token_ids=[], prompt_lookup_num_tokens=6).steps())
    assert sum(s.from_draft for s in steps) >= 18  # right drafts supply most tokens
    i = 10  # a token inside a run of 6 drafts: the pass fed tokens past it into the cache
    assert steps[i].from_draft and steps[i + 1].from_draft
    eos, stop = plain.token_ids[i], tok.decode(plain.token_ids[: i + 1])[-2:]
    for kw in (dict(eos_token_ids=[eos]), dict(eos_token_ids=[], stop=[stop])):
        want = Generator(model, tok, p, max_new_tokens=24, **kw)
        for _ in want.steps():
            pass
        g = Generator(model, tok, p, max_new_tokens=24, prompt_lookup_num_tokens=6, **kw)
        for _ in g.steps():
            pass
        assert (g.result.token_ids, g.result.text, g.result.finish_reason) == (
            want.result.token_ids, want.result.text, want.result.finish_reason)  # fmt: skip
        assert g.caches is not None and want.caches is not None
        assert [c.offset for c in g.caches] == [c.offset for c in want.caches]  # no draft left in the cache
        K, W = g.caches[0].key_values[0], want.caches[0].key_values[0]
        assert np.array_equal(np.asarray(K), np.asarray(W))  # and what is there is the plain run's


@pytest.mark.kernels
def test_a_constraint_and_top_logprobs_hold_inside_accepted_runs(models, monkeypatch):
    from fs_generate import speculative

    model, tok = models["bf16"]
    p = prompts(tok)[1]
    kw = dict(max_new_tokens=16, eos_token_ids=[], regex="[a-z ]{1,40}[.]", top_logprobs=3)

    def seen(steps):
        return [(s.token_id, s.text, s.logprob, s.top_logprobs, s.finish_reason) for s in steps]

    want = list(Generator(model, tok, p, **kw).steps())
    # every 3rd draft off by one: often a token the regex forbids, which must end the accepted run
    monkeypatch.setattr(speculative, "lookup", drafter(p, [s.token_id for s in want], wrong_every=3))
    got = list(Generator(model, tok, p, prompt_lookup_num_tokens=5, **kw).steps())
    assert seen(got) == seen(want) and sum(s.from_draft for s in got) >= len(want) // 2


def test_a_model_that_is_not_batch_invariant_is_refused(tiny_dir):
    model, tok = load(str(tiny_dir), dtype="float32")  # float32 copies on BLAS: a row's bits depend on M
    with pytest.raises(GenerateError, match="batch-invariant"):
        generate(model, tok, "hi", max_new_tokens=2, prompt_lookup_num_tokens=3)
    with pytest.raises(GenerateError, match=r"prompt_lookup_num_tokens must be an int in \[0, 16\]"):
        generate(model, tok, "hi", max_new_tokens=2, prompt_lookup_num_tokens=-1)


@pytest.mark.kernels
def test_the_cli_flag_prints_the_same_tokens_and_the_acceptance(models, tiny_dir, capsys):
    import json

    from fs_generate.cli import main

    model, tok = models["bf16"]
    args = ["--model", str(tiny_dir), "--dtype", "bfloat16", "-p", "a b c a b c a b", "--raw", "-m", "8", "--json"]
    assert main([*args, "--prompt-lookup-num-tokens", "4"]) == 0
    out = capsys.readouterr()
    got = json.loads(out.out)
    assert got["token_ids"] == generate(model, tok, tok.encode("a b c a b c a b"), max_new_tokens=8).token_ids
    assert got["accepted_tokens"] <= got["drafted_tokens"] and "Speculation: " in out.err
    assert main(["--model", str(tiny_dir), "--dtype", "float32", "-p", "hi", "--prompt-lookup-num-tokens", "4"]) == 2
    assert "batch-invariant" in capsys.readouterr().err
