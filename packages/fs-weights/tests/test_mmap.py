"""Reading one layer costs that layer's bytes, not the file's: measured as peak RSS in a fresh process."""

import json
import subprocess
import sys

import numpy as np
import pytest

from fs_weights import Qwen3Config, write_random_checkpoint

PROBE = """
import json, resource, sys
from fs_weights import Checkpoint
def rss():  # VmHWM: ru_maxrss would carry the parent's peak across exec
    try:
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
ck = Checkpoint.open(sys.argv[1]); before = rss()
names = [n for n in ck.names() if n.startswith("model.layers.3.")]
total = sum(float(ck.get(n).sum()) for n in names)
print(json.dumps({"before": before, "after": rss(), "layer_bytes": sum(ck.info(n).nbytes for n in names),
                  "file_bytes": ck.nbytes}))
"""


def wide_config(layers: int) -> Qwen3Config:
    """Layers big enough (3.5 MB each in float32) that page-level RSS effects dominate the runtime's noise."""
    cfg = dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_attention_heads=8, num_key_value_heads=4)
    return Qwen3Config.from_dict({**cfg, "num_hidden_layers": layers, "head_dim": 64})


def test_one_layer_costs_its_bytes_not_the_files(tmp_path):
    cfg = wide_config(layers=24)
    d = write_random_checkpoint(tmp_path / "m", cfg, dtype="float32")
    out = subprocess.run([sys.executable, "-c", PROBE, str(d)], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["file_bytes"] > 20 * r["layer_bytes"]
    grew = r["after"] - r["before"]
    assert grew < 3 * r["layer_bytes"] + 8 * 2**20, r  # f32: mapped pages + one temporary per tensor


RELEASE = """
import json, sys
import numpy as np
from fs_weights import Checkpoint
def rss():
    return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmRSS:"))
ck = Checkpoint.open(sys.argv[1])
base = rss()
sums = [float(ck.raw(n).astype(np.float64).sum()) for n in ck.names()]
touched = rss()
for n in ck.names():
    ck.release(n)
released = rss()
again = [float(ck.raw(n).astype(np.float64).sum()) for n in ck.names()]
print(json.dumps({"touched": touched - base, "released": released - base, "same": sums == again,
                  "file_bytes": ck.nbytes}))
"""


def moe_source(tmp_path, kind):
    """A Qwen3-MoE layer's experts stored stacked: mlx-lm's ``switch_mlp`` safetensors, or llama.cpp's Q8_0 GGUF."""
    from fs_weights import save_safetensors
    from fs_weights.gguf_export import write_gguf

    if kind == "stacked safetensors":
        rng = np.random.default_rng(0)
        d = tmp_path / "stacked"
        d.mkdir()
        shapes = {"gate_proj": (16, 512, 512), "up_proj": (16, 512, 512), "down_proj": (16, 512, 512)}
        save_safetensors(d / "model.safetensors", {f"model.layers.0.mlp.switch_mlp.{p}.weight":
                         rng.standard_normal(s).astype(np.float32) for p, s in shapes.items()})  # fmt: skip
        return d
    cfg = dict(vocab_size=512, hidden_size=512, intermediate_size=512, num_attention_heads=8, num_key_value_heads=4,
               head_dim=64, num_hidden_layers=1, model_type="qwen3_moe", num_experts=16, num_experts_per_tok=2,
               moe_intermediate_size=512, norm_topk_prob=True)  # fmt: skip
    src = write_random_checkpoint(tmp_path / "moe", Qwen3Config.from_dict(cfg), dtype="float32")
    return write_gguf(src, tmp_path / "moe.gguf", ggml_type="Q8_0")


@pytest.mark.parametrize("kind", ["dense safetensors", "stacked safetensors", "stacked GGUF"])
def test_release_drops_a_tensors_pages_and_rereads_them(tmp_path, kind):
    """What a loader that keeps only converted copies relies on to keep peak RSS near the kept bytes - also for one
    expert of a stacked tensor (its own slice of the file, read and released as the loader goes expert by expert)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads VmRSS from /proc (Linux)")
    if kind == "dense safetensors":
        d = write_random_checkpoint(tmp_path / "m", wide_config(layers=8), dtype="float32")
    else:
        d = moe_source(tmp_path, kind)
    out = subprocess.run([sys.executable, "-c", RELEASE, str(d)], capture_output=True, text=True, check=True)
    r = json.loads(out.stdout)
    assert r["touched"] > 0.8 * r["file_bytes"], r  # reading mapped every page in
    assert r["released"] < 0.2 * r["file_bytes"], r  # release() took them out of this process's RSS
    assert r["same"]  # and the data reads back unchanged


def test_is_view_tells_a_kept_view_from_a_converted_copy(tmp_path):
    """The loader releases a tensor's pages only when what it kept is a copy: releasing a view's pages would make
    every later read fault them back in (correct, but the weights would be re-read from disk each step)."""
    from fs_weights import Checkpoint

    ck = Checkpoint.open(moe_source(tmp_path, "stacked safetensors"))
    name = "model.layers.0.mlp.experts.3.up_proj.weight"
    assert ck.is_view(name, ck.raw(name)) and not ck.is_view(name, np.array(ck.raw(name)))
    gguf = Checkpoint.open(moe_source(tmp_path, "stacked GGUF"))
    assert not gguf.is_view(name, gguf.raw(name))  # Q8_0 blocks repacked as codes: a copy
    norm = "model.layers.0.input_layernorm.weight"
    assert gguf.is_view(norm, gguf.raw(norm))  # F32 in the file: read in place
