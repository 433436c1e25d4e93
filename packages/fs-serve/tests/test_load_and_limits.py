"""Under load every answer is its solo answer; a client that leaves cancels its request; a full queue is a 429;
loading is a 503; the API key guards every route but /health."""

import threading
import time

import httpx
import numpy as np

from fs_generate import generate
from serving import start


def chat_body(i: int, n: int) -> dict:
    return {
        "model": "tiny",
        "messages": [{"role": "user", "content": f"Request {i}: " + "tell me more " * (i % 7)}],
        "max_tokens": n,
        "temperature": 0,
    }


def test_16_clients_x_4_requests_each_equal_their_solo_answer(server, tiny):
    model, tok = tiny
    jobs = [(c, k, 4 + (c * 4 + k) % 17) for c in range(16) for k in range(4)]
    got: dict[tuple[int, int], str] = {}
    errors: list[BaseException] = []

    def client(c: int) -> None:
        oc = server.client(timeout=300)
        try:
            for cc, k, n in jobs:
                if cc == c:
                    body = chat_body(c * 4 + k, n)
                    r = oc.chat.completions.create(**body)
                    got[(c, k)] = r.choices[0].message.content
        except BaseException as e:  # reported below, not lost in a thread
            errors.append(e)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(got) == 64
    for c, k, n in jobs:
        body = chat_body(c * 4 + k, n)
        ids = tok.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True)
        assert got[(c, k)] == generate(model, tok, ids, max_new_tokens=n).text, (c, k)
    assert server.state.engine.stats()["running"] == 0


def wait_for(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_a_client_that_leaves_mid_stream_cancels_its_request(server):
    engine = server.state.engine
    before = engine.counters["cancelled"]
    body = chat_body(1, 3000) | {"stream": True}
    with httpx.Client(timeout=60) as h, h.stream("POST", f"{server.url}/v1/chat/completions", json=body) as r:
        got = []
        for line in r.iter_lines():
            if line.startswith("data:"):
                got.append(line)
            if len(got) == 3:
                break
    closed_at = engine.counters["forward_passes"]
    assert wait_for(lambda: engine.counters["cancelled"] == before + 1 and engine.stats()["running"] == 0)
    assert engine.counters["forward_passes"] - closed_at <= 3  # stopped within a step or so, not after 3000 tokens
    r = server.client().chat.completions.create(**chat_body(2, 4))
    assert r.choices[0].finish_reason == "length"


def test_a_client_that_gives_up_on_a_plain_request_cancels_it(server):
    engine = server.state.engine
    before = engine.counters["cancelled"]
    try:
        httpx.post(f"{server.url}/v1/chat/completions", json=chat_body(3, 3000), timeout=1.5)
    except httpx.ReadTimeout:
        pass  # the client closed the connection: the server must notice without a stream to write to
    else:
        raise AssertionError("3000 tokens in 1.5 s: the request was too short to test a disconnect")
    assert wait_for(lambda: engine.counters["cancelled"] == before + 1 and engine.stats()["running"] == 0)
    assert server.state.runner.in_flight == 0


def test_a_full_queue_is_a_429_with_retry_after(tiny):
    s = start(*tiny, max_batch=1, max_queue=0)
    try:
        body = chat_body(1, 3000) | {"stream": True}
        with httpx.Client(timeout=60) as h, h.stream("POST", f"{s.url}/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()  # held: a dropped iterator closes the stream (a disconnect, which cancels)
            assert next(lines).startswith("data:")
            full = httpx.post(f"{s.url}/v1/chat/completions", json=chat_body(2, 4), timeout=30)
            assert full.status_code == 429 and full.headers["retry-after"] == "1"
            assert full.json()["error"]["type"] == "rate_limit_error"
        assert wait_for(lambda: s.state.runner.in_flight == 0)
        assert httpx.post(f"{s.url}/v1/chat/completions", json=chat_body(2, 4), timeout=30).status_code == 200
    finally:
        s.stop()


def test_health_is_503_while_loading_then_200(tiny):
    from fs_serve import ServeConfig, create_app
    from serving import Server

    gate = threading.Event()

    def slow_load():
        gate.wait(30)
        return tiny

    s = Server(create_app(slow_load, ServeConfig(model_id="tiny", kv_budget_bytes=8 << 20)), wait=False)
    try:

        def answer(path):
            try:
                return httpx.get(f"{s.url}{path}", timeout=2)
            except httpx.TransportError:  # not listening yet
                return None

        assert wait_for(lambda: answer("/health") is not None)
        r = answer("/health")
        assert r.status_code == 503 and r.json()["status"] == "loading"
        r = answer("/v1/models")  # the listing itself needs no model, but completions do
        busy = httpx.post(f"{s.url}/v1/chat/completions", json=chat_body(1, 2), timeout=5)
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        gate.set()
        s.wait_healthy()
        assert answer("/health").json() == {"status": "ok"}
    finally:
        gate.set()
        s.stop()


def test_health_turns_ok_only_after_the_warm_up(tiny, monkeypatch):
    """Ready means warm: the first request must not pay the kernels' first-run compile or the thread contests, so
    /health stays 503 until fs_generate.warm_up has run, and the serving engine starts with nothing done."""
    import fs_serve.app as app
    from fs_serve import ServeConfig, create_app
    from serving import Server

    gate, warming = threading.Event(), threading.Event()
    real = app.warm_up

    def slow_warm_up(engine):
        warming.set()
        gate.wait(30)
        return real(engine)

    monkeypatch.setattr(app, "warm_up", slow_warm_up)
    s = Server(create_app(lambda: tiny, ServeConfig(model_id="tiny", kv_budget_bytes=8 << 20)), wait=False)
    try:
        assert warming.wait(30)  # loaded, now warming up
        r = httpx.get(f"{s.url}/health", timeout=2)
        assert r.status_code == 503 and r.json()["status"] == "loading" and "warming up" in r.json()["message"]
        gate.set()
        s.wait_healthy()
        stats = s.state.engine.stats()
        assert stats["finished"] == stats["forward_passes"] == stats["cached_tokens"] == 0
    finally:
        gate.set()
        s.stop()


def test_the_api_key_guards_everything_but_health(tiny):
    s = start(*tiny, api_key="sekrit")
    try:
        assert httpx.get(f"{s.url}/health").status_code == 200
        for path in ("/v1/models", "/metrics"):
            assert httpx.get(f"{s.url}{path}").status_code == 401
            assert httpx.get(f"{s.url}{path}", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert httpx.get(f"{s.url}{path}", headers={"Authorization": "Bearer sekrit"}).status_code == 200
        r = httpx.post(f"{s.url}/v1/chat/completions", json=chat_body(1, 2))
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert s.client(api_key="sekrit").models.list().data[0].id == "tiny"
    finally:
        s.stop()


def test_metrics_count_tokens_and_report_the_engine(server):
    server.client().chat.completions.create(**chat_body(3, 5))
    text = httpx.get(f"{server.url}/metrics").text
    assert "fs:num_requests_running 0.0" in text
    assert "fs:kv_blocks_total" in text and "fs:time_to_first_token_seconds_count" in text
    generated = float(
        next(line.split()[1] for line in text.splitlines() if line.startswith("fs:generation_tokens_total"))
    )
    assert generated >= 5


def test_kv_bits_serves_from_a_pool_of_codes(tiny):
    """``fs-serve --kv-bits 8 --kv-group-size 32``: the engine's pool keeps codes (stats say so, and the same budget
    holds more blocks), and an answer is generate's with the same kv_bits."""
    from fs_serve.cli import parser

    args = parser().parse_args(["--kv-bits", "8", "--kv-group-size", "32"])
    assert (args.kv_bits, args.kv_group_size) == (8, 32)
    model, tok = tiny
    s = start(model, tok, kv_bits=8, kv_group_size=32, kv_budget_bytes=2 << 20)
    try:
        stats = s.state.engine.stats()
        assert stats["kv_bits"] == 8 and stats["kv_blocks_total"] * model.kv_block_bytes(16) > 2 << 20
        body = chat_body(3, 12)
        choice = s.client(timeout=120).chat.completions.create(**body, logprobs=True).choices[0]
    finally:
        s.stop()
    ids = tok.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True)
    want = generate(model, tok, ids, max_new_tokens=12, kv_bits=8, kv_group_size=32)
    got = [t.logprob for t in choice.logprobs.content]
    assert choice.message.content == want.text and np.allclose(got, want.logprobs, rtol=0, atol=1e-5)
    exact = generate(model, tok, ids, max_new_tokens=12)
    assert np.abs(np.subtract(exact.logprobs, got)).max() > 1e-4  # the codes were read
