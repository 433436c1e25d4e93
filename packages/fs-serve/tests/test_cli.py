"""The fs-serve command as a user runs it: the demo model with no arguments, a clean exit on SIGTERM mid-stream,
and clear errors (exit 1, one line, no traceback) for a missing model or a busy port."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import httpx

from serving import wait_healthy

CMD = [sys.executable, "-m", "fs_serve.cli"]
ENV = os.environ | {"HF_HUB_OFFLINE": "1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serves_the_demo_model_and_exits_0_on_sigterm_mid_stream():
    port = free_port()
    p = subprocess.Popen([*CMD, "--port", str(port), "--shutdown-timeout", "3"], env=ENV, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, 90)
        body = {"messages": [{"role": "user", "content": "What is a list?"}], "max_tokens": 100000, "stream": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=60) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            first = json.loads(next(lines).removeprefix("data: "))
            assert first["model"] == "fs-demo"
            p.send_signal(signal.SIGTERM)
            t0 = time.monotonic()
            rest = [x for x in lines if x]  # the stream ends properly: finished, or cancelled at the shutdown timeout
        assert rest[-1] == "data: [DONE]"
        last = json.loads([x for x in rest if x.startswith("data: {")][-1].removeprefix("data: "))
        assert last["choices"][0]["finish_reason"] == "length"
        rc = p.wait(30)
        assert rc == 0
        assert time.monotonic() - t0 < 20
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = p.stderr.read().decode()
    assert "Traceback" not in err, err


def test_a_missing_model_is_one_clear_line():
    r = subprocess.run([*CMD, "--model", "/nonexistent/model"], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "/nonexistent/model" in r.stderr and "Traceback" not in r.stderr


def test_llama_servers_m_is_the_model_and_a_bad_adapter_is_refused_before_serving():
    r = subprocess.run([*CMD, "-m", "/nonexistent/model"], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "/nonexistent/model" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([*CMD, "--adapter-path", "/nonexistent/a"], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "fs-serve: error: /nonexistent/a: no such adapter directory (it holds " + (
        "adapter_config.json and adapters.safetensors or adapter_model.safetensors)"
    )


def test_a_busy_port_is_said_before_loading():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = subprocess.run([*CMD, "--port", str(port)], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and f"127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr


def test_version():
    r = subprocess.run([*CMD, "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.startswith("fs-serve ")


def test_the_adapter_is_what_the_server_loads(tmp_path):
    """mlx_lm.server's --adapter-path: the served model is the adapted one (greedy completions differ from the base's,
    and equal fs-generate's with the same adapter)."""
    from fs_generate import generate, load
    from fs_generate.demo import demo_model_path
    from fs_serve.cli import load_for, parser
    from fs_weights.random_adapter import write_random_adapter

    demo = demo_model_path()
    adapter = write_random_adapter(demo, tmp_path / "adapters", rank=8, num_layers=2)
    served, tok = load_for(parser().parse_args(["--model", str(demo), "--adapter-path", str(adapter)]), demo)
    base, _ = load(str(demo))
    kw = dict(max_new_tokens=12, eos_token_ids=[])
    got = generate(served, tok, "Once upon a time", **kw).token_ids
    assert got == generate(load(str(demo), adapter_path=str(adapter))[0], tok, "Once upon a time", **kw).token_ids
    assert got != generate(base, tok, "Once upon a time", **kw).token_ids
