"""Speculative decoding with a draft model (draft_model.py) and inside the Engine's continuous batching: every output
equals plain ``generate`` bit for bit, a draft identical to the target supplies every token it guesses, the
draft's cache follows the context, the engine's tables and prefix cache keep only accepted tokens."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fs_generate import Engine, GenerateError, generate
from fs_generate.draft_model import DraftModel
from fs_generate.generate import Generator

SAMPLED = dict(temperature=0.8, top_p=0.9, seed=5, repetition_penalty=1.2)


@pytest.fixture(scope="module")
def models(tiny_dir):
    from fs_generate import load
    from fs_model import cpu

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: the kept-weight kernels are tested by `nox -s kernels`")
    bf16, tok = load(str(tiny_dir), dtype="bfloat16")
    int4, _ = load(str(tiny_dir), quantize="int4")
    return bf16, int4, tok


@pytest.fixture(scope="module")
def unrelated(tmp_path_factory):
    """Another random model with the same vocabulary: its guesses are almost never the target's."""
    from fs_model import load_model
    from fs_weights import preset, write_random_checkpoint

    d = write_random_checkpoint(tmp_path_factory.mktemp("other") / "m", preset("tiny", tie_word_embeddings=False),
                                dtype="bfloat16", seed=7)  # fmt: skip
    return load_model(d)


def motif_prompt(seed=11):
    motif = np.random.default_rng(seed).integers(0, 150000, 12).tolist()
    return motif * 3 + motif[:4]


def same(got, want):
    return (got.token_ids, got.logprobs, got.text, got.finish_reason) == (
        want.token_ids, want.logprobs, want.text, want.finish_reason)  # fmt: skip


@pytest.mark.kernels
def test_a_draft_model_never_changes_the_output(models, unrelated, tiny_dir):
    from fs_generate import load

    bf16, int4, tok = models
    int8, _ = load(str(tiny_dir), quantize="int8")
    p = motif_prompt()
    cases = (  # (target, sampling, [(draft, k)]): each target format drafted by itself, its int4 self, another model
        (bf16, dict(), [(int4, 3), (bf16, 1), (bf16, 5), (unrelated, 4)]),
        (bf16, SAMPLED, [(int4, 3), (bf16, 5)]),
        (int8, dict(), [(int8, 5), (unrelated, 4)]),
        (int4, SAMPLED, [(int4, 2)]),
    )
    for target, kw, drafts in cases:
        want = generate(target, tok, p, max_new_tokens=20, eos_token_ids=[], **kw)
        for draft, k in drafts:
            got = generate(target, tok, p, max_new_tokens=20, eos_token_ids=[], draft_model=draft, num_draft_tokens=k,
                           **kw)  # fmt: skip
            assert same(got, want), (kw, k)
            assert got.accepted_tokens <= got.drafted_tokens
            if draft is target and not kw:  # its own greedy guesses: all confirmed (a cache off by one is not)
                assert got.accepted_tokens == got.drafted_tokens >= 20 - got.forward_passes
            if draft is unrelated:  # another model's guesses: almost none confirmed, the output still the target's
                assert got.accepted_tokens <= got.drafted_tokens // 4, (got.accepted_tokens, got.drafted_tokens)


@pytest.mark.kernels
def test_the_draft_cache_follows_the_context(models):
    target, int4, tok = models
    p = motif_prompt(3)
    draft = DraftModel(int4, target)
    g = Generator(target, tok, p, max_new_tokens=12, eos_token_ids=[], draft_model=draft, num_draft_tokens=4)
    steps = list(g.steps())
    assert draft.fed[: len(p)] == p and len(draft.fed) <= len(g.seq) + 3
    assert draft.caches is not None and all(c.offset == len(draft.fed) for c in draft.caches)
    # its guesses after a rewind are the ones a fresh draft makes on the same context
    ctx = g.seq[: len(p) + 5]
    assert draft(ctx, 3) == DraftModel(int4, target)(ctx, 3)
    assert len(steps) == 12


def test_bad_draft_settings_are_refused_by_name(tiny_dir, models):
    from fs_weights import preset, write_random_checkpoint

    target, int4, tok = models
    with pytest.raises(GenerateError, match=r"num_draft_tokens must be an int in \[1, 16\]"):
        generate(target, tok, "hi", max_new_tokens=2, draft_model=int4, num_draft_tokens=0)
    with pytest.raises(GenerateError, match="choose one"):
        generate(target, tok, "hi", max_new_tokens=2, draft_model=int4, prompt_lookup_num_tokens=2)
    from fs_model import load_model

    other = write_random_checkpoint(tiny_dir.parent / "other-vocab", preset("tiny", vocab_size=1000), seed=2)
    small = load_model(other, dtype="bfloat16")
    with pytest.raises(GenerateError, match="vocabulary has 1000 ids, the target's 151936"):
        generate(target, tok, "hi", max_new_tokens=2, draft_model=small)
    with pytest.raises(GenerateError, match="vocabulary has 1000 ids"):
        Engine(target, tok, draft_model=small)
    f32 = load_model(tiny_dir, dtype="float32")
    with pytest.raises(GenerateError, match="num_draft_tokens needs a batch-invariant model"):
        Engine(f32, tok, draft_model=int4)


def oracle(prompts, wants, wrong_every=3):
    """Drafts from each prompt's plain run (every ``wrong_every``-th one off by one) for prompt lookup's place."""

    def draft(seq, k):
        for p, w in zip(prompts, wants, strict=True):
            if list(seq[: len(p)]) == list(p):
                at = len(seq) - len(p)
                return [t + 1 if (at + j) % wrong_every == 0 else t for j, t in enumerate(w[at : at + k])]
        return []

    return draft


@pytest.mark.kernels
def test_the_engine_speculates_inside_the_batch_and_equals_generate(models, monkeypatch):
    from fs_generate import speculative

    target, _, tok = models
    prompts = [motif_prompt(s) for s in (1, 2, 3)] + [tok.encode("plain decoding beside the drafts")]
    for kw in (dict(), SAMPLED):
        wants = [generate(target, tok, p, max_new_tokens=16, eos_token_ids=[], **kw) for p in prompts]
        monkeypatch.setattr(speculative, "lookup", oracle(prompts, [w.token_ids for w in wants]))
        eng = Engine(target, tok, max_batch=4, max_step_tokens=64)
        hs = [eng.submit(p, max_new_tokens=16, eos_token_ids=[], prompt_lookup_num_tokens=0 if i == 3 else 5, **kw)
              for i, p in enumerate(prompts)]  # fmt: skip
        got = [h.result() for h in hs]
        assert all(same(g, w) for g, w in zip(got, wants, strict=True)), kw
        s = eng.stats()
        assert s["accepted_tokens"] >= 3 * 8 and s["forward_passes"] < 16 + 4  # drafts confirmed, passes saved
        assert got[3].drafted_tokens == 0 and sum(st.from_draft for st in hs[0].stream()) == got[0].accepted_tokens
        # the prefix cache holds only accepted tokens: the conversation so far, resumed, equals a cold run
        follow = prompts[0] + got[0].token_ids
        hit = eng.submit(follow, max_new_tokens=6, eos_token_ids=[]).result()
        assert hit.cached_tokens >= 48 and same(hit, generate(target, tok, follow, max_new_tokens=6, eos_token_ids=[]))
        assert eng.stats()["kv_blocks_used"] == 0  # every table released, drafts' blocks included


@pytest.mark.kernels
def test_the_engine_with_a_draft_model_equals_generate(models):
    target, _, tok = models
    prompts = [motif_prompt(s) for s in (4, 5)]
    wants = [generate(target, tok, p, max_new_tokens=12, eos_token_ids=[]) for p in prompts]
    eng = Engine(target, tok, max_batch=2, draft_model=target, num_draft_tokens=4)
    got = [h.result() for h in [eng.submit(p, max_new_tokens=12, eos_token_ids=[]) for p in prompts]]
    assert all(same(g, w) for g, w in zip(got, wants, strict=True))
    assert all(g.accepted_tokens == g.drafted_tokens >= 8 for g in got)  # its own guesses, all confirmed


@pytest.mark.kernels
def test_drafts_never_preempt_or_overflow_a_tight_pool(models, monkeypatch):
    from fs_generate import speculative

    target, _, tok = models
    prompts = [motif_prompt(s) for s in (6, 7)]
    wants = [generate(target, tok, p, max_new_tokens=30, eos_token_ids=[]) for p in prompts]
    monkeypatch.setattr(speculative, "lookup", oracle(prompts, [w.token_ids for w in wants], wrong_every=7))
    block = target.kv_block_bytes(16)
    eng = Engine(target, tok, max_batch=2, block_size=16, kv_budget_bytes=7 * block, prefix_cache=False)
    got = [h.result() for h in [eng.submit(p, max_new_tokens=30, eos_token_ids=[], prompt_lookup_num_tokens=16)
                                for p in prompts]]  # fmt: skip
    assert all(same(g, w) for g, w in zip(got, wants, strict=True))
    assert eng.stats()["preempted"] >= 1 and eng.stats()["kv_blocks_used"] == 0  # the pool was too small for both


@pytest.mark.kernels
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    motif=st.lists(st.integers(0, 151935), min_size=1, max_size=6),
    repeats=st.integers(1, 4),
    k=st.integers(1, 16),
    sampled=st.booleans(),
)
def test_hypothesis_prompt_lookup_equals_plain(models, motif, repeats, k, sampled):
    target, _, tok = models
    p = motif * repeats
    kw = dict(max_new_tokens=10, eos_token_ids=[], **(SAMPLED if sampled else {}))
    assert same(generate(target, tok, p, prompt_lookup_num_tokens=k, **kw), generate(target, tok, p, **kw))


@pytest.mark.kernels
def test_a_chat_speculates_every_turn_and_an_interrupted_run_keeps_only_emitted_tokens(models):
    from fs_generate.chat_session import ChatSession

    target, int4, tok = models
    kw = dict(max_new_tokens=14, eos_token_ids=[])

    def turns(chat, cut):
        first = []
        for i, s in enumerate(chat.ask("Repeat: one two three one two three")):
            first.append(s.token_id)
            if i == cut:  # Ctrl-C inside an accepted run: drafts past this token sit in the cache
                break
        return first, [s.token_id for s in chat.ask("Again")], list(chat.tokens)

    want = turns(ChatSession(target, tok, **kw), cut=6)
    for spec in (
        dict(draft_model=target, num_draft_tokens=4),
        dict(draft_model=int4),
        dict(prompt_lookup_num_tokens=3),
    ):
        chat = ChatSession(target, tok, **kw, **spec)
        assert turns(chat, cut=6) == want, spec
        if "draft_model" in spec:
            assert chat.last.drafted_tokens > 0


@pytest.mark.kernels
def test_the_cli_drafts_with_the_models_own_weights_at_int4(models, tiny_dir, capsys):
    import json

    from fs_generate.cli import main

    target, _, tok = models
    args = ["--model", str(tiny_dir), "--dtype", "bfloat16", "-p", "one two three one two", "--raw", "-m", "8", "-q"]
    assert main([*args, "--json", "--draft-model", str(tiny_dir), "--draft-quantize", "int4"]) == 0
    out = capsys.readouterr()
    got = json.loads(out.out)
    assert got["token_ids"] == generate(target, tok, tok.encode("one two three one two"), max_new_tokens=8).token_ids
    assert got["drafted_tokens"] > 0 and "Speculation: " in out.err
    assert main([*args, "--draft-quantize", "int4"]) == 2
    assert "--draft-quantize needs --draft-model" in capsys.readouterr().err
