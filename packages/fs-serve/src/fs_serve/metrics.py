"""``/metrics``: Prometheus text from prometheus-client, one registry per app (two servers in one process, as the
tests run them, never share counters).

Gauges (running, waiting, KV blocks) and the engine's own counters (drafted / accepted tokens) are read from
``Engine.stats()`` when scraped, so they are never stale;
counters and histograms are updated as requests finish (tokens) and as their first and later tokens arrive.
Names follow vLLM's where one exists (``fs:`` for ``vllm:``), so existing dashboards need only a prefix change.
"""

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GAUGES = {
    "running": ("fs:num_requests_running", "requests in the running batch"),
    "waiting": ("fs:num_requests_waiting", "requests waiting for a batch slot or KV blocks"),
    "kv_blocks_used": ("fs:kv_blocks_used", "KV blocks held by live requests"),
    "kv_blocks_cached": ("fs:kv_blocks_cached", "KV blocks kept only by the prefix cache"),
    "kv_blocks_total": ("fs:kv_blocks_total", "KV blocks in the pool"),
}
COUNTERS = {  # speculative decoding (vLLM's names); prometheus appends _total
    "drafted_tokens": ("fs:spec_decode_num_draft_tokens", "tokens drafted for verification"),
    "accepted_tokens": ("fs:spec_decode_num_accepted_tokens", "drafted tokens the model confirmed"),
}


class EngineGauges(Collector):
    def __init__(self, stats: Callable[[], dict[str, Any] | None]):
        self.stats = stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        s = self.stats() or {}
        for key, (name, doc) in GAUGES.items():
            yield GaugeMetricFamily(name, doc, value=float(s.get(key, 0)))
        for key, (name, doc) in COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=float(s.get(key, 0)))


class Metrics:
    def __init__(self, stats: Callable[[], dict[str, Any] | None]):
        self.registry = CollectorRegistry()
        self.registry.register(EngineGauges(stats))
        r = self.registry
        self.prompt_tokens = Counter("fs:prompt_tokens", "prompt tokens of finished requests", registry=r)
        self.generation_tokens = Counter("fs:generation_tokens", "tokens generated", registry=r)
        self.cached_tokens = Counter(
            "fs:cached_prompt_tokens", "prompt tokens served from the prefix cache", registry=r
        )
        self.requests = Counter(
            "fs:requests", "finished requests by endpoint and outcome", ["endpoint", "outcome"], registry=r
        )
        self.ttft = Histogram(
            "fs:time_to_first_token_seconds",
            "from the request's arrival to its first token",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.tpot = Histogram(
            "fs:time_per_output_token_seconds",
            "between consecutive tokens of one request",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.4, 0.8, 1.5, 3),
            registry=r,
        )

    def text(self) -> bytes:
        return generate_latest(self.registry)
