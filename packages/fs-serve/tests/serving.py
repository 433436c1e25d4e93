"""The test server and a scripted model (imported by the tests; conftest.py holds the fixtures)."""

import socket
import threading
import time
from typing import Any

import httpx
import numpy as np


def wait_healthy(url: str, timeout: float) -> None:
    """Until ``url``/health answers 200 (503 while loading, refused before listening)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not become healthy in {timeout:g} s")


class Server:
    def __init__(self, app: Any, wait: bool = True):
        import uvicorn

        self.app = app
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        if wait:
            self.wait_healthy()

    def wait_healthy(self) -> None:
        wait_healthy(self.url, 60)

    @property
    def state(self) -> Any:
        return self.app.state.fs

    def client(self, **kw: Any) -> Any:
        import openai

        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


def start(model: Any, tok: Any, **config: Any) -> Server:
    from fs_serve import ServeConfig, create_app

    config.setdefault("model_id", "tiny")
    config.setdefault("kv_budget_bytes", 8 << 20)
    return Server(create_app(lambda: (model, tok), ServeConfig(**config)))


class Scripted:
    """The tiny model, its logits replaced: after a prompt of ``prompt_len`` tokens it emits ``script`` token by
    token, then EOS. The K/V are the real model's (the engine's bookkeeping runs for real)."""

    def __init__(self, inner: Any, eos: int):
        self.inner, self.eos = inner, eos
        self.script: list[int] = []
        self.prompt_len = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def forward_paged(self, batch: Any, store: Any) -> np.ndarray:
        logits = np.asarray(self.inner.forward_paged(batch, store))
        out = np.full_like(logits, -1e9)
        for i, ctx in enumerate(batch.context):
            k = int(ctx) - self.prompt_len
            out[i, self.script[k] if 0 <= k < len(self.script) else self.eos] = 0.0
        return out
