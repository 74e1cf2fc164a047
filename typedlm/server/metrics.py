"""Prometheus metrics, one registry per app (several apps can live in one process, e.g. tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

KNOWN_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/ready", "/metrics",
               "/v1/decide", "/v1/systemone")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class Metrics:
    def __init__(self, state):
        self.registry = r = CollectorRegistry()
        self.requests = Counter("typedlm_requests", "HTTP requests by path and status code",
                                ["path", "status"], registry=r)
        self.prompt_tokens = Counter("typedlm_prompt_tokens", "prompt tokens of finished generations", registry=r)
        self.completion_tokens = Counter("typedlm_completion_tokens", "generated tokens", registry=r)
        self.finished = Counter("typedlm_generations", "finished generations (choices) by finish_reason",
                                ["finish_reason", "constraint"], registry=r)
        self.degraded = Counter("typedlm_degraded_requests", "structured requests served unconstrained "
                                "(Warning 199)", registry=r)
        self.latency = Histogram("typedlm_request_latency_seconds", "generation request latency, arrival to "
                                 "last token", buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("typedlm_time_to_first_token_seconds", "arrival to first generated token",
                              buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("typedlm_queue_depth", "requests waiting for a batch slot", registry=r)
        self.queue_depth.set_function(lambda: state.scheduler.queue_depth if state.scheduler else 0)
        self.batch_size = Gauge("typedlm_batch_size", "rows in the running decode batch", registry=r)
        self.batch_size.set_function(lambda: state.scheduler.batch_size if state.scheduler else 0)
        self.kv_slots = Gauge("typedlm_kv_slots_in_use", "decode KV slots held by rows", registry=r)
        self.kv_slots.set_function(lambda: state.scheduler.kv.size if state.scheduler else 0)
        self.ready = Gauge("typedlm_ready", "1 once the model is loaded and warmed", registry=r)
        self.ready.set_function(lambda: 1.0 if state.ready else 0.0)
        r.register(_GrammarCacheCollector(state))
        r.register(_PrefixCacheCollector(state))

    def count_request(self, path: str, status: int) -> None:
        self.requests.labels(path if path in KNOWN_PATHS else "other", str(status)).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _GrammarCacheCollector:
    """Reads ``engine.grammars.stats`` at scrape time."""

    def __init__(self, state):
        self.state = state

    def collect(self):
        eng = self.state.engine_or_none
        stats = eng.grammars.stats if eng is not None else None
        hits = CounterMetricFamily("typedlm_grammar_cache_hits", "grammar compile cache hits")
        misses = CounterMetricFamily("typedlm_grammar_cache_misses", "grammar compile cache misses (compiles)")
        secs = CounterMetricFamily("typedlm_grammar_compile_seconds", "seconds spent compiling grammars")
        entries = GaugeMetricFamily("typedlm_grammar_cache_entries", "compiled grammars held in the cache")
        hits.add_metric([], stats.hits if stats else 0)
        misses.add_metric([], stats.misses if stats else 0)
        secs.add_metric([], stats.compile_seconds if stats else 0.0)
        entries.add_metric([], stats.entries if stats else 0)
        yield from (hits, misses, secs, entries)

    def describe(self):
        return []


class _PrefixCacheCollector:
    """Reads the runner's ``prefix_cache.stats`` at scrape time (zeros on a backend without one)."""

    def __init__(self, state):
        self.state = state

    def collect(self):
        eng = self.state.engine_or_none
        cache = eng.runner.prefix_cache if eng is not None else None
        st = cache.stats if cache is not None else None
        for name, kind, text, key in (
                ("typedlm_prefix_cache_hits", CounterMetricFamily, "prompt prefills that reused cached KV", "hits"),
                ("typedlm_prefix_cache_misses", CounterMetricFamily, "prompt prefills with nothing cached", "misses"),
                ("typedlm_prefix_cache_cached_tokens", CounterMetricFamily, "prompt tokens read from the prefix "
                 "cache instead of computed", "cached_tokens"),
                ("typedlm_prefix_cache_evictions", CounterMetricFamily, "KV blocks evicted (LRU)", "evictions"),
                ("typedlm_prefix_cache_bytes", GaugeMetricFamily, "bytes of KV held by the prefix cache", "bytes"),
                ("typedlm_prefix_cache_blocks", GaugeMetricFamily, "KV blocks held by the prefix cache", "blocks")):
            m = kind(name, text)
            m.add_metric([], getattr(st, key) if st else 0)
            yield m

    def describe(self):
        return []
