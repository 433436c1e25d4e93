"""fs-perplexity (perplexity_cli.py): the figure mlx_lm.perplexity computes for the same sequences, llama-perplexity's
running table, and a named error for every bad input."""

import json
import math
import re

import numpy as np
import pytest

from fs_generate import load
from fs_generate.perplexity_cli import main
from fs_generate.scoring import score

TEXT = "The quick brown fox jumps over the lazy dog. A stitch in time saves nine. " * 12


def run(capsys, *args):
    code = main(["--quiet", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def result(out):
    ppl, se = re.search(r"Perplexity: ([\d.]+) ± ([\d.]+)", out).groups()
    return float(ppl), float(se)


@pytest.mark.parity
def test_the_figure_is_mlx_lms_for_the_same_sequences(tiny_dir, tmp_path, capsys, reference):
    """mlx_lm.perplexity.eval_ppl on the same checkpoint (mlx's CPU backend) and the same token rows: perplexity and
    its standard error agree to float32 rounding (f32 weights); fs-perplexity --backend mlx gives the same figure."""
    mx = reference("mlx.core")
    from mlx_lm import load as mlx_load
    from mlx_lm.perplexity import eval_ppl

    f = tmp_path / "t.txt"
    f.write_text(TEXT, encoding="utf-8")
    code, out, _ = run(capsys, "--model", str(tiny_dir), str(f), "--sequence-length", "32", "--batch-size", "3")
    assert code == 0, out
    ppl, se = result(out)
    model, _ = mlx_load(str(tiny_dir))
    ids = list(load(str(tiny_dir))[1].encode(TEXT))
    n = len(ids) // 32
    want_ppl, want_se = eval_ppl(model, mx.array(ids[: n * 32]).reshape(n, 32), batch_size=3)
    assert ppl == pytest.approx(want_ppl, rel=1e-4) and se == pytest.approx(want_se, rel=1e-3)
    table = re.findall(r"\[(\d+)\]([\d.]+),", out)
    assert [int(i) for i, _ in table] == list(range(1, n + 1)) and float(table[-1][1]) == ppl
    code, out, _ = run(capsys, "--model", str(tiny_dir), str(f), "-c", "32", "-b", "3", "--backend", "mlx")
    assert code == 0 and result(out)[0] == pytest.approx(ppl, rel=1e-4)  # fs's MLX backend: the same figure


def test_the_figure_is_the_scores_own_and_jsonl_rows_concatenate(tiny_dir, tmp_path, capsys):
    model, tok = load(str(tiny_dir))
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    rows = [{"text": "Hello there, friend."}, {"prompt": "Q: two plus two? ", "completion": "A: four."},
            {"messages": chat}] * 4  # fmt: skip
    d = tmp_path / "data"
    d.mkdir()
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, out, _ = run(capsys, "--model", str(tiny_dir), "--data-path", str(d), "-c", "16", "-b", "2")
    assert code == 0, out
    ids: list[int] = []
    for r in rows:
        text = r.get("text") or (r["prompt"] + r["completion"] if "prompt" in r else None)
        ids += (
            tok.encode(text)
            if text
            else tok.encode(tok.apply_chat_template(r["messages"], add_generation_prompt=False))
        )
    seqs = [ids[i * 16 : (i + 1) * 16] for i in range(len(ids) // 16)]
    nll = [-lp for s in score(model, seqs) for lp in s.logprobs[1:]]
    assert result(out)[0] == pytest.approx(math.exp(float(np.mean(nll))), rel=1e-4)


@pytest.mark.parametrize(
    "args,words",
    [
        ([], "give a text file or --data-path"),
        (["FILE", "--data-path", "FILE"], "give a text file or --data-path"),
        (["SHORT"], "not one sequence of --sequence-length 512"),
        (["FILE", "-c", "1"], "--sequence-length must be in \\[2, "),
        (["FILE", "--num-samples", "0"], "--num-samples must be a positive count or -1"),
        (["--data-path", "BAD"], "bad.jsonl:2: a row needs"),
        (["--data-path", "nowhere/at/all"], "neither a file, a directory nor a dataset id"),
        (["NOTUTF8"], "not valid UTF-8 \\(byte offset 1\\)"),
    ],
)
def test_bad_input_is_one_named_error(tiny_dir, tmp_path, capsys, args, words):
    (tmp_path / "f.txt").write_text(TEXT, encoding="utf-8")
    (tmp_path / "short.txt").write_text("too short", encoding="utf-8")
    (tmp_path / "bad.jsonl").write_text('{"text": "ok"}\n{"body": 1}\n', encoding="utf-8")
    (tmp_path / "n.txt").write_bytes(b"a\xffb")
    swap = {"FILE": tmp_path / "f.txt", "SHORT": tmp_path / "short.txt", "BAD": tmp_path / "bad.jsonl",
            "NOTUTF8": tmp_path / "n.txt"}  # fmt: skip
    code, out, err = run(capsys, "--model", str(tiny_dir), *[str(swap.get(a, a)) for a in args])
    assert code != 0 and re.search(words, err), err
    assert "Traceback" not in err and "Perplexity" not in out
