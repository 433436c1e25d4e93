"""The agent decodes with prompt lookup by default (generation.py): on a batch-invariant model every response is
the tokens plain greedy decoding gives - free text and under the action schema - the drafts are actually used,
and a model that is not batch invariant decodes plainly."""

import numpy as np
import pytest

from fs_agent import generation
from fs_agent.branching import KvPrefixGenerator
from fs_agent.generation import PROMPT_LOOKUP, greedy_decode
from fs_agent.protocol import action_schema
from fs_kvcache import DenseKVCache
from fs_model import load_model
from fs_tokenizer import Tokenizer
from fs_weights import preset, write_random_checkpoint


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, qwen3_tokenizer_dir):
    from fs_model import cpu

    if not cpu.HAVE_NUMBA:
        pytest.skip("numba is not installed: prompt lookup needs the batch-invariant kernels")
    d = write_random_checkpoint(tmp_path_factory.mktemp("agent") / "tiny", preset("tiny"), dtype="bfloat16",
                                tokenizer=qwen3_tokenizer_dir, seed=4)  # fmt: skip
    return load_model(d), Tokenizer.from_pretrained(d)


@pytest.fixture
def passes(monkeypatch):
    """Record each Speculation the agent makes; drafts come from the plain answer (an oracle, every 4th wrong)."""
    made, want = [], {}
    original = generation.Speculation

    class Counted(original):  # type: ignore[misc,valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    def oracle(seq, k):
        at = len(seq) - want["start"]
        return [t + 1 if (at + j) % 4 == 0 else t for j, t in enumerate(want["ids"][at : at + k])]

    monkeypatch.setattr(generation, "Speculation", Counted)
    monkeypatch.setattr("fs_generate.speculative.lookup", oracle)
    return made, want


def test_responses_equal_plain_greedy_decoding_and_use_the_drafts(tiny, passes):
    model, tok = tiny
    made, want = passes
    ids = tok.encode("edit: replace foo with bar in foo.py, then show foo.py")
    for schema in (None, action_schema()):
        plain = greedy_decode(model, tok, ids, model.make_cache(), 0, 24, schema, prompt_lookup=0)
        want.update(start=len(ids), ids=plain)
        got = greedy_decode(model, tok, ids, model.make_cache(), 0, 24, schema)  # the default: PROMPT_LOOKUP
        assert got == plain and len(plain) >= 8
        assert made[-1].accepted >= len(plain) // 2 and made[-1].passes < len(plain)


def test_a_forked_prefix_drafts_from_the_whole_context(tiny, passes):
    model, tok = tiny
    made, want = passes
    msgs = [{"role": "system", "content": "act"}, {"role": "user", "content": "read a.txt"}]
    gen = KvPrefixGenerator(model, tok, 16)
    gen.restore_checkpoint(gen.save_checkpoint(msgs))
    ids = gen._encode(msgs, True)
    n = len(gen.prefix_state[0])
    caches = [DenseKVCache(key_values=kv) for kv in gen.prefix_state[1]]
    plain = greedy_decode(model, tok, ids[n:], caches, n, 16, prompt_lookup=0)
    want.update(start=len(ids), ids=plain)  # the drafter sees the prefix's tokens too (history)
    assert gen(msgs) == tok.decode(plain)
    assert made[-1].accepted >= len(plain) // 2 and PROMPT_LOOKUP > 0


def test_a_model_that_is_not_batch_invariant_decodes_plainly(qwen3_tokenizer_dir, tmp_path, passes):
    made, _ = passes
    d = write_random_checkpoint(tmp_path / "f32", preset("tiny"), dtype="float32", tokenizer=qwen3_tokenizer_dir)
    model, tok = load_model(d), Tokenizer.from_pretrained(d)
    assert not getattr(model, "batch_invariant", False)
    out = greedy_decode(model, tok, tok.encode("hi"), model.make_cache(), 0, 4)
    assert len(out) == 4 and made == [] and np.all(np.asarray(out) >= 0)
