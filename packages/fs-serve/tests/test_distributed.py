"""fs-serve --distributed: two ranks on 127.0.0.1 (an mx.distributed ring, as mlx.launch sets up), rank 0
serving the OpenAI API over a tensor-parallel engine; SIGTERM on rank 0 ends both."""

import os
import signal
import subprocess
import sys

import pytest

from fs_generate import generate, load
from serving import wait_healthy

pytestmark = pytest.mark.parity


def test_two_ranks_answer_the_openai_client(tiny, tmp_path, reference, ring_hostfile):
    reference("mlx.core")
    import openai

    path = tiny[0].path
    hosts, (http,) = ring_hostfile(2, extra=1)
    argv = [sys.executable, "-m", "fs_serve.cli", "--model", path, "--backend", "mlx", "--dtype", "float32",
            "--port", str(http), "--log-level", "warning"]  # fmt: skip  # --distributed: implied by MLX_RANK
    procs = [
        subprocess.Popen(
            argv,
            env=dict(os.environ, MLX_RANK=str(r), MLX_HOSTFILE=str(hosts)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for r in range(2)
    ]
    try:
        wait_healthy(f"http://127.0.0.1:{http}", 120)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{http}/v1", api_key="x", max_retries=0)
        msgs = [{"role": "user", "content": "Hello"}]
        r = client.chat.completions.create(model=path, messages=msgs, max_tokens=8, temperature=0)
        chunks = client.chat.completions.create(model=path, messages=msgs, max_tokens=8, temperature=0,
                                                stream=True)  # fmt: skip
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        model, tok = load(path, backend="mlx", dtype="float32")
        ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)  # the server: thinking on
        want = generate(model, tok, ids, max_new_tokens=8)
        assert r.choices[0].message.content == streamed == want.text
        procs[0].send_signal(signal.SIGTERM)
        codes = [p.wait(timeout=60) for p in procs]
    finally:
        for p in procs:
            p.kill()
    logs = [p.stdout.read().decode() for p in procs]
    assert codes == [0, 0], logs


def test_distributed_needs_the_mlx_backend_and_a_shared_pool(tiny, capsys):
    from fs_serve.cli import main

    assert main(["--model", tiny[0].path, "--distributed"]) == 1
    assert "--distributed needs --backend mlx" in capsys.readouterr().err
