"""fs-bench: llama-bench's table (same columns, so rows paste side by side), one row per thread count and test,
JSON rows with every sample, bad values refused before the model loads."""

import json
import re

import pytest

from fs_generate.bench_cli import main

LLAMA_BENCH_HEADER = ["model", "size", "params", "backend", "threads", "test", "t/s"]  # llama-bench -o md


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_table_has_llama_bench_columns_and_a_row_per_test(tiny_dir, capsys):
    assert main(["--model", str(tiny_dir), "-p", "16,32", "-n", "4", "-np", "1,3", "-t", "1,2", "-r", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert cells(lines[0]) == LLAMA_BENCH_HEADER
    assert all(re.fullmatch(r"-+:?", c) for c in cells(lines[1]))
    rows = [cells(x) for x in lines[2:] if x.startswith("|")]
    assert [(r[4], r[5]) for r in rows] == [(t, n) for t in ("1", "2") for n in ("pp16", "pp32", "tg4", "tg4 np3")]
    assert all(re.fullmatch(r"qwen3 \d+M F32", r[0]) and r[3] == "CPU" for r in rows)  # tiny_dir: float32
    assert all(re.fullmatch(r"\d+\.\d\d ± \d+\.\d\d", r[6]) for r in rows)
    assert lines[-1].startswith("build: fs-generate ")


def test_llama_benchs_b_is_the_prefill_batch_size(tiny_dir, capsys):
    """-b as llama-bench means it: tokens per prefill pass - a 32-token prompt with -b 8 is 4 passes of 8."""
    from fs_generate import load
    from fs_generate.bench_cli import prefill_seconds

    assert main(["--model", str(tiny_dir), "-p", "32", "-n", "0", "-b", "8,512", "-r", "1"]) == 0
    rows = [cells(x) for x in capsys.readouterr().out.strip().splitlines()[2:] if x.startswith("|")]
    assert [r[5] for r in rows] == ["pp32 b8", "pp32 b512"]
    model, _ = load(str(tiny_dir))
    passes = []

    class Counting:  # the model, with every forward pass's token count recorded
        def __getattr__(self, name):
            return getattr(model, name)

        def __call__(self, tokens, *a, **k):
            passes.append(len(tokens[0]))
            return model(tokens, *a, **k)

    prefill_seconds(Counting(), list(range(1, 33)), 8)
    assert passes == [8, 8, 8, 8]


def test_json_rows_carry_every_sample(tiny_dir, capsys):
    assert main(["--model", str(tiny_dir), "-p", "8", "-n", "0", "-r", "3", "--json"]) == 0
    out, err = capsys.readouterr()
    (row,) = [json.loads(x) for x in out.strip().splitlines()]
    assert row["test"] == "pp8" and len(row["samples_ts"]) == 3 and row["avg_ts"] > 0 and "loading" not in err


@pytest.mark.parametrize(
    "argv, words",
    [(["-b", "0"], "batch size"), (["-np", "0"], "count of sequences"), (["-r", "0"], "--repetitions"),
     (["-p", "0", "-n", "0"], "nothing to measure"),
     (["-p", "x"], "comma-separated")],
)  # fmt: skip
def test_bad_values_fail_before_loading(argv, words, capsys):
    try:
        code = main(["--model", "/nonexistent", *argv])
    except SystemExit as e:  # argparse's own refusals
        code = e.code
    assert code == 2 and words in capsys.readouterr().err


def test_a_gguf_is_described_as_llama_bench_describes_it(tiny_dir, tmp_path):
    """Its size on disk and llama.cpp's name for its file type (a Q4_K_M file says "Q4_K - Medium"), and the
    parameters the architecture has, not the float32 size fs may hold some tensors in."""
    from fs_generate import load
    from fs_generate.bench_cli import describe, gguf_kind
    from fs_generate.gguf_cli import export

    out = export(str(tiny_dir), tmp_path / "t.gguf", "q8_0")
    model, _ = load(str(out), dtype="float32")
    row = describe(out, model)
    assert row["model"].endswith(" Q8_0") and row["size"] == out.stat().st_size
    assert row["params"] == describe(tiny_dir, load(str(tiny_dir))[0])["params"]
    assert (gguf_kind(15), gguf_kind(18), gguf_kind(0), gguf_kind(10)) == ("Q4_K - Medium", "Q6_K", "all F32",
                                                                           "Q2_K - Medium")  # fmt: skip


def test_a_single_run_and_an_outlier_run_are_flagged(capsys):
    from fs_generate.bench_cli import _warn_outliers

    _warn_outliers("tg128", [20.1])
    assert "one run (-r 1), so ± 0.00 is not a measured spread" in capsys.readouterr().err
    _warn_outliers("tg128", [20.35, 0.60, 20.1, 19.8])
    assert "tg128: 1 of 4 runs under half the median (0.60 against 19.95 t/s)" in capsys.readouterr().err
    _warn_outliers("tg128", [20.35, 18.0, 20.1])
    assert capsys.readouterr().err == ""
