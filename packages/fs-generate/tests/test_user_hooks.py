"""mlx-lm's sampler= and logits_processors= on every path that samples: generate, stream_generate,
generate_batch, prompt-lookup speculation and the Engine (user_hooks.py)."""

import numpy as np
import pytest

from fs_generate import Engine, GenerateError, generate, generate_batch, load, stream_generate

PROMPT = "The with statement"


@pytest.fixture(scope="module")
def demo():
    return load(None)


def banning(token):
    def processor(tokens, logits):
        out = logits.copy()
        out[token] = -np.inf
        return out

    return processor


def second_best(logprobs):
    """A custom sampler: the runner-up (lowest id on ties), so the output differs from greedy."""
    order = np.lexsort((np.arange(logprobs.shape[0]), -logprobs))
    return int(order[1])


def test_a_processor_that_bans_the_greedy_token_changes_every_path_alike(demo):
    model, tok = demo
    greedy = generate(model, tok, PROMPT, max_new_tokens=8)
    banned = greedy.token_ids[0]
    kw = dict(max_new_tokens=8, logits_processors=[banning(banned)])
    got = generate(model, tok, PROMPT, **kw)
    assert banned not in got.token_ids and got.token_ids != greedy.token_ids
    assert [s.token_id for s in stream_generate(model, tok, PROMPT, **kw)][:8] == got.token_ids
    assert generate_batch(model, tok, [PROMPT, "A list"], **kw)[0].token_ids == got.token_ids


@pytest.mark.kernels
def test_hooks_hold_through_speculation_and_the_engine_under_load(fast):
    """Pure hooks keep fs's equal contracts: prompt lookup's verify rows and the engine's batch (four requests
    at once, each with its own hooks or none) give exactly generate's tokens."""
    model, tok = fast
    prompts = [[5, 6, 7, 5, 6, 7, 5, 6], [9, 10, 11], [300, 301, 302, 303], [42]]
    hooks = [dict(logits_processors=[banning(17)]), dict(sampler=second_best), {},
             dict(logits_processors=[banning(3)], sampler=second_best)]  # fmt: skip
    want = [
        generate(model, tok, p, max_new_tokens=10, eos_token_ids=[], **h).token_ids
        for p, h in zip(prompts, hooks, strict=True)
    ]
    for p, h, w in zip(prompts, hooks, want, strict=True):
        assert (
            generate(model, tok, p, max_new_tokens=10, eos_token_ids=[], prompt_lookup_num_tokens=3, **h).token_ids == w
        )
    engine = Engine(model, tok)
    handles = [engine.submit(p, max_new_tokens=10, eos_token_ids=[], **h) for p, h in zip(prompts, hooks, strict=True)]
    engine.run_until_idle()
    assert [h.result().token_ids for h in handles] == want
    assert 17 not in want[0] and want[1] != want[2]


def test_the_processor_sees_the_prompt_and_every_token_chosen_so_far(demo):
    model, tok = demo
    seen = []
    generate(model, tok, [5, 6, 7], max_new_tokens=3, logits_processors=[lambda t, z: seen.append(t.tolist()) or z])
    out = generate(model, tok, [5, 6, 7], max_new_tokens=3).token_ids
    assert seen == [[5, 6, 7], [5, 6, 7, out[0]], [5, 6, 7, *out[:2]]]


def test_a_custom_sampler_replaces_fs_s_draw(demo):
    model, tok = demo
    got = generate(model, tok, PROMPT, max_new_tokens=6, sampler=second_best)
    assert got.token_ids != generate(model, tok, PROMPT, max_new_tokens=6).token_ids
    first = generate(model, tok, PROMPT, max_new_tokens=1, logits_processors=[lambda t, z: z]).token_ids[0]
    assert got.token_ids[0] != first  # the runner-up, not the argmax
    with pytest.raises(GenerateError, match="sampler= replaces temperature"):
        generate(model, tok, PROMPT, max_new_tokens=2, sampler=second_best, temperature=0.7)


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(sampler=3), "sampler must be a callable"),
        (dict(logits_processors=banning(1)), "must be a list of callables"),
        (dict(logits_processors=[None]), r"logits_processors\[0\] is a NoneType"),
        (dict(logits_processors=[lambda t, z: z[:10]]), r"logits_processors\[0\] returned float32 \(10,\)"),
        (dict(logits_processors=[lambda t, z: z * np.nan]), "none NaN"),
        (dict(sampler=lambda lp: -1), r"the sampler returned -1; expected a token id in \[0, "),
        (dict(sampler=lambda lp: 7, regex="[0-9]+"), "the sampler chose token 7, which the constraint"),
        (dict(logits_processors=[lambda t, z: np.full_like(z, -np.inf)], sampler=second_best), "every token's logit"),
    ],
)
def test_a_hook_that_breaks_its_contract_is_one_error_naming_it(demo, kw, says):
    model, tok = demo
    with pytest.raises(GenerateError, match=says):
        generate(model, tok, PROMPT, max_new_tokens=2, **kw)


def test_a_sampler_sees_the_repetition_penalty_as_fs_s_draw_does(demo):
    """An argmax sampler is greedy decoding: with repetition_penalty the two still agree (the penalty is applied
    before either draw), and differ from the unpenalized run."""
    model, tok = demo
    argmax = lambda lp: int(np.argmax(lp))  # noqa: E731
    kw = dict(max_new_tokens=24, repetition_penalty=3.0)
    want = generate(model, tok, PROMPT, **kw).token_ids
    assert generate(model, tok, PROMPT, sampler=argmax, **kw).token_ids == want
    assert want != generate(model, tok, PROMPT, max_new_tokens=24).token_ids
