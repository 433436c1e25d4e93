"""Bad requests and hostile command-line use of fs-generate: a ``GenerateError`` (or a ``fs-generate: error:`` line,
exit 2) naming the value, a quiet exit for a closed pipe or Ctrl-C, and never a silently wrong output."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from fs_generate import GenerateError, generate, load
from fs_generate.sampling import SamplingParams, distribution


@pytest.fixture(scope="module")
def loaded(tiny_dir):
    return load(str(tiny_dir))


@pytest.mark.parametrize("seed", [-1, 1.5, "1", True])
def test_a_seed_must_be_a_non_negative_int(loaded, seed):
    model, tok = loaded
    with pytest.raises(GenerateError, match="seed must be a non-negative int"):
        generate(model, tok, "hi", max_new_tokens=2, temperature=0.5, seed=seed)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_sampling_values_are_refused(value):
    for field in ("temperature", "repetition_penalty"):
        with pytest.raises(GenerateError, match=field):
            SamplingParams(**{field: value})


@pytest.mark.parametrize("temperature", [1e-45, 1e-50, 1e-30])
def test_a_vanishing_temperature_is_the_greedy_limit_not_token_0(loaded, temperature):
    """logits / 1e-45 overflows float32: without the guard every probability is NaN and the draw is token 0."""
    logits = np.array([-3.0, 1.0, 7.5, 2.0], np.float32)
    probs = distribution(logits, SamplingParams(temperature=temperature))
    assert probs.tolist() == [0.0, 0.0, 1.0, 0.0]
    model, tok = loaded
    cold = generate(model, tok, "The sea", max_new_tokens=6, temperature=temperature, seed=3)
    greedy = generate(model, tok, "The sea", max_new_tokens=6)
    assert cold.token_ids == greedy.token_ids


def cli(*args, stdin=None, **kw):
    return subprocess.run(
        [sys.executable, "-m", "fs_generate.cli", *args], input=stdin, capture_output=True, timeout=300, **kw
    )


@pytest.mark.parametrize(
    "args,words",
    [
        (["--seed", "-1"], b"argument --seed: '-1' is not a non-negative integer"),
        (["--temp", "1e999"], b"argument --temp: '1e999' is not a finite non-negative number"),
        (["--max-tokens", "x"], b"argument --max-tokens/-m/-n/--n-predict: 'x' is not a non-negative integer"),
        (["--top-k", "-3"], b"argument --top-k: '-3' is not a non-negative integer"),
    ],
)
def test_bad_flag_values(tiny_dir, args, words):
    done = cli("--model", str(tiny_dir), "--prompt", "hi", *args)
    assert done.returncode == 2 and words in done.stderr and b"Traceback" not in done.stderr


def test_a_bad_config_is_one_error_line(tiny_dir, tmp_path):
    import shutil

    bad = shutil.copytree(tiny_dir, tmp_path / "bad")
    cfg = json.loads((bad / "config.json").read_text()) | {"rms_norm_eps": float("nan")}
    (bad / "config.json").write_text(json.dumps(cfg))
    done = cli("--model", str(bad), "--prompt", "hi")
    last = done.stderr.decode().strip().splitlines()[-1]
    assert done.returncode == 2 and last.startswith("fs-generate: error: ") and "'rms_norm_eps'" in last
    (bad / "config.json").write_text("[" * 50_000)
    done = cli("--model", str(bad), "--prompt", "hi")
    assert done.returncode == 2 and b"config.json: JSON nested deeper than" in done.stderr


def test_a_prompt_on_stdin_that_is_not_utf8(tiny_dir):
    done = cli("--model", str(tiny_dir), "--prompt", "-", stdin=b"caf\xe9")
    assert done.returncode == 2 and b"standard input: not valid UTF-8 (byte offset 3)" in done.stderr


def test_a_closed_pipe_is_a_quiet_exit(tiny_dir):
    done = subprocess.run(
        f"{sys.executable} -m fs_generate.cli --model {tiny_dir} --prompt hi --max-tokens 200 | head -c1",
        shell=True,
        capture_output=True,
        timeout=300,
    )
    assert b"Traceback" not in done.stderr and b"Error" not in done.stderr and len(done.stdout) == 1


@pytest.mark.parametrize("delay", [0.15, 0.3, 1.0, 2.5])
def test_ctrl_c_at_any_moment_exits_130_without_a_traceback(tiny_dir, delay):
    """From the first imports (numpy turns a KeyboardInterrupt inside its import into an ImportError) through
    loading and generating. Not before: Python's own start-up (stdlib imports, ~30 ms idle, over 50 ms on a loaded
    2-core host, when a 0.05 s delay once hit ``enum``) runs before any fs code can install a handler."""
    p = subprocess.Popen(
        [sys.executable, "-m", "fs_generate.cli", "--model", str(tiny_dir), "--prompt", "hi", "--max-tokens", "5000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(delay)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130 and b"Traceback" not in err, err[-400:]


def test_threads_caps_the_kernel_pools(tiny_dir):
    code = (
        "import sys; from fs_generate.cli import main; main(sys.argv[1:]); "
        "from fs_model.cpu import HAVE_NUMBA, SWITCHES; print('threads', SWITCHES.num_threads)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "--model", str(tiny_dir), "--prompt", "hi", "--max-tokens", "2", "--threads", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "threads 1" in done.stdout, done.stderr[-400:]
    assert cli("--model", str(tiny_dir), "--prompt", "hi", "--threads", "0").returncode == 2


def test_engine_arguments_beyond_the_machine_or_the_vocabulary_are_generate_errors(loaded):
    from fs_generate import Engine

    model, tok = loaded
    with pytest.raises(GenerateError, match="kv_budget_bytes=1000000000000000 is more than this machine's"):
        Engine(model, tok, kv_budget_bytes=10**15)
    engine = Engine(model, tok, kv_budget_bytes=4 << 20)
    with pytest.raises(GenerateError, match=r"eos_token_ids \[1000000000\] are not ids of the"):
        engine.submit("hi", max_new_tokens=2, eos_token_ids=[10**9])
    with pytest.raises(GenerateError, match="eos_token_ids must be a list of token ids, got int"):
        engine.submit("hi", max_new_tokens=2, eos_token_ids=5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "constraint, words",
    [
        ({"regex": "[^\\x00-\\U0010FFFF]"}, "the regex admits no output"),
        ({"json_schema": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}}, "json_schema admits no output"),
        ({"json_schema": json.loads('{"items":' * 100 + "{}" + "}" * 100)}, "nested deeper than 64 levels"),
    ],
)
def test_a_constraint_that_admits_nothing_or_nests_too_deep_is_refused(loaded, constraint, words):
    from fs_generate.errors import ConstraintError

    model, tok = loaded
    with pytest.raises(ConstraintError, match=words):
        generate(model, tok, "hi", max_new_tokens=3, **constraint)


def test_a_deep_schema_built_in_python_is_refused_not_a_recursion_error(loaded):
    model, tok = loaded
    schema: dict = {}
    cur = schema
    for _ in range(3000):
        cur["items"] = {}
        cur = cur["items"]
    with pytest.raises(GenerateError, match="nested deeper than 64 levels"):
        generate(model, tok, "hi", max_new_tokens=3, json_schema=schema)


def test_file_flags_and_outputs_take_regular_files_only(tiny_dir, tmp_path, capsys):
    import os

    from fs_generate.cache_prompt import main as cache_prompt
    from fs_generate.cli import main as fs_generate

    os.mkfifo(tmp_path / "fifo")
    assert fs_generate(["--model", str(tiny_dir), "--prompt", "x", "--grammar", str(tmp_path / "fifo")]) == 2
    assert "is a FIFO, device or socket, not a regular file" in capsys.readouterr().err
    assert cache_prompt(["--model", str(tiny_dir), "--prompt", "x", "--out", str(tmp_path / "fifo")]) == 2
    assert "fifo: exists and is a device, FIFO or socket" in capsys.readouterr().err
