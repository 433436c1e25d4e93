"""Day 8's cache mechanics on a tiny random fs_model checkpoint with the real Qwen3 tokenizer and chat template."""

import numpy as np
import pytest

from fs_agent import AgentError, KvPrefixGenerator
from fs_model import load_model
from fs_tokenizer import Tokenizer
from fs_weights import preset, write_random_checkpoint


class Recording:
    """Wraps an fs_model model and records the offset and length of every call."""

    def __init__(self, model):
        self.model, self.calls = model, []
        self.config = model.config

    def tokens_array(self, rows):
        return self.model.tokens_array(rows)

    def __call__(self, tokens, offset, caches, logits_to_keep=None):
        self.calls.append((int(offset), int(np.asarray(self.model.to_numpy(tokens)).shape[1])))
        return self.model(tokens, offset, caches, logits_to_keep=logits_to_keep)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, qwen3_tokenizer_dir):
    d = write_random_checkpoint(
        tmp_path_factory.mktemp("agent") / "tiny", preset("tiny"), dtype="float32", tokenizer=qwen3_tokenizer_dir
    )
    return d, Tokenizer.from_pretrained(d)


def as_numpy(x):
    return (
        np.array(x.astype(__import__("mlx.core").core.float32)) if type(x).__module__.startswith("mlx") else np.array(x)
    )


def scenario(model, tok):
    rec = Recording(model)
    gen = KvPrefixGenerator(rec, tok, max_tokens=6)
    msgs = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Set answer to 2."},
        {"role": "assistant", "content": '{"tool":"edit_file","path":"app.py","old":"1","new":"2"}'},
        {"role": "user", "content": "Tool result:\nedited app.py"},
    ]
    cp = gen.save_checkpoint(msgs)
    n = len(cp.cached_token_ids)
    assert rec.calls == [(0, n)]
    frozen = [tuple(as_numpy(a) for a in kv) for kv in gen._prefix.key_values]
    outputs = []
    for steering in ("Operator steering:\nonly validate", "Operator steering:\ntry another edit"):
        branch = gen.fork()
        branch.restore_checkpoint(cp)
        steered = [*msgs, {"role": "user", "content": steering}]
        ids = tok.encode(tok.apply_chat_template(steered, add_generation_prompt=True, enable_thinking=False))
        assert tuple(ids[:n]) == cp.cached_token_ids  # the saved prompt is an exact token prefix
        before = len(rec.calls)
        outputs.append(branch(steered))
        assert rec.calls[before][0] == n and rec.calls[before][1] == len(ids) - n  # suffix only, at the prefix length
        assert all(off != 0 for off, _ in rec.calls[before:])  # no call at offset 0 after the checkpoint
        assert branch.reuse.reused_tokens == n
    for kv, snap in zip(gen._prefix.key_values, frozen, strict=True):
        for a, b in zip(kv, snap, strict=True):
            np.testing.assert_array_equal(as_numpy(a), b)  # the frozen prefix arrays are unchanged
    branch = gen.fork()
    branch.restore_checkpoint(cp)
    swapped = [dict(m) for m in msgs]
    swapped[1]["content"] = "Set answer to 3."  # same length, different token
    with pytest.raises(AgentError, match="steered prompt does not extend the saved token prefix"):
        branch([*swapped, {"role": "user", "content": "x"}])
    return outputs


def test_numpy_backend(tiny):
    d, tok = tiny
    scenario(load_model(d), tok)


@pytest.mark.parity
def test_mlx_backend_matches_numpy(tiny, reference):
    reference("mlx.core")
    d, tok = tiny
    assert scenario(load_model(d, backend="mlx", dtype="float32"), tok) == scenario(load_model(d), tok)
