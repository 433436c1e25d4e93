"""``fs-convert-gguf`` (gguf_cli.py): the shipped demo model written as GGUF generates what the safetensors demo
generates (its tokenizer's ``trim_offsets`` used to make the vocabulary refuse), llama.cpp's flag names work, and
every bad target is one error line before any tensor is written. The per-type round trips of the writer itself are
test_gguf.py's."""

import pytest

from fs_generate import generate, load
from fs_generate.demo import DEMO_MODEL as DEMO_DIR
from fs_generate.gguf_cli import main

pytest.importorskip("gguf", reason="gguf is a dependency of fs-weights[gguf], which fs-generate requires")


@pytest.mark.parametrize("outtype", ["bf16", "q8_0"])
def test_the_demo_model_as_gguf_generates_what_it_generates_from_safetensors(tmp_path, capsys, outtype):
    out = tmp_path / f"demo-{outtype}.gguf"
    assert main([str(DEMO_DIR), "--outfile", str(out), "--outtype", outtype, "-q"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    model, tok = load(str(out), dtype="float32")  # as the demo loads: float32 copies, no kernel compile
    ref_model, ref_tok = load(None)
    ids = ref_tok.encode("The with statement")
    assert list(tok.encode("The with statement")) == list(ids)  # the vocabulary survived the trip
    got, want = generate(model, tok, ids, max_new_tokens=12), generate(ref_model, ref_tok, ids, max_new_tokens=12)
    if outtype == "bf16":  # the demo model is bf16: the same bits, the same tokens
        assert got.token_ids == want.token_ids
    else:
        assert got.text  # 8-bit rows: close, not equal (test_gguf.py bounds the dequantization)


def test_bad_targets_are_refused_before_writing(tmp_path, capsys):
    existing = tmp_path / "there.gguf"
    existing.write_bytes(b"keep me")
    for args, words in [
        ([str(existing)], "exists; pass --overwrite"),
        ([str(tmp_path / "model.safetensors")], "a GGUF file's name ends in .gguf"),
        ([str(tmp_path / "nowhere" / "m.gguf")], "no such directory"),
    ]:
        assert main([str(DEMO_DIR), *args, "-q"]) == 2
        assert words in capsys.readouterr().err
    assert existing.read_bytes() == b"keep me"


def test_fs_weights_convert_points_a_gguf_target_here(tmp_path, capsys):
    from fs_weights.cli import main as weights_main

    assert weights_main(["convert", str(DEMO_DIR), str(tmp_path / "x.gguf")]) != 0
    assert "fs-convert-gguf" in capsys.readouterr().err and not (tmp_path / "x.gguf").exists()
