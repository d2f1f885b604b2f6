"""A serving engine's Prometheus page read into benchd's common server series, by a table of each server's names."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True, slots=True)
class ServerNames:
    """One server's sample names for each common series; where several are listed, the first present is read (the
    current name first, then older ones). Empty: the server exports nothing of the kind."""

    server: str
    kv_cache_usage: tuple[str, ...] = ()  # gauge, used / total of the KV cache, 0–1
    requests_running: tuple[str, ...] = ()  # gauge
    requests_waiting: tuple[str, ...] = ()  # gauge
    preemptions: tuple[str, ...] = ()  # counter of requests preempted (vLLM) or retracted (SGLang)
    prefix_hits: tuple[str, ...] = ()  # counter of prompt tokens found in the prefix cache
    prefix_queries: tuple[str, ...] = ()  # counter of prompt tokens looked up in it
    prefix_hit_rate: tuple[str, ...] = ()  # gauge, where no counters are exported

    def names(self) -> tuple[str, ...]:
        return (self.kv_cache_usage + self.requests_running + self.requests_waiting + self.preemptions
                + self.prefix_hits + self.prefix_queries + self.prefix_hit_rate)


# Detection: the first server of this table with any of its names on the page. Counter samples carry `_total`
# (prometheus_client exposes a counter `x` as the sample `x_total`).
SERVERS = (
    # vLLM V1, vllm/v1/metrics/loggers.py (PrometheusStatLogger; vllm-project/vllm at 005a810): gauges
    # vllm:num_requests_running, vllm:num_requests_waiting, vllm:kv_cache_usage_perc ("1 means 100 percent
    # usage"; vllm:gpu_cache_usage_perc before 0.9), counters vllm:num_preemptions, vllm:prefix_cache_hits and
    # vllm:prefix_cache_queries (in tokens; vllm:gpu_prefix_cache_* before 0.9), labels model_name and engine (one
    # set per engine core with data parallelism). vLLM V0 had a gauge vllm:gpu_prefix_cache_hit_rate.
    ServerNames("vllm",
                kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
                requests_running=("vllm:num_requests_running",),
                requests_waiting=("vllm:num_requests_waiting",),
                preemptions=("vllm:num_preemptions_total",),
                prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
                prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
                prefix_hit_rate=("vllm:gpu_prefix_cache_hit_rate",)),
    # SGLang, python/sglang/srt/metrics/collector.py (sgl-project/sglang at 00ae9c1): SchedulerMetricsCollector's
    # gauges sglang:token_usage (KV pool tokens used / total), sglang:num_running_reqs, sglang:num_queue_reqs,
    # sglang:cache_hit_rate (the latest prefill batch only: used when the counters are missing), the counter
    # sglang:num_retracted_requests_total (requests retracted from a full KV pool: SGLang's preemption), and
    # TokenizerMetricsCollector's counters sglang:cached_tokens_total and sglang:prompt_tokens_total.
    ServerNames("sglang",
                kv_cache_usage=("sglang:token_usage",),
                requests_running=("sglang:num_running_reqs",),
                requests_waiting=("sglang:num_queue_reqs",),
                preemptions=("sglang:num_retracted_requests_total",),
                prefix_hits=("sglang:cached_tokens_total",),
                prefix_queries=("sglang:prompt_tokens_total",),
                prefix_hit_rate=("sglang:cache_hit_rate",)),
    # TGI, docs/source/reference/metrics.md (huggingface/text-generation-inference at 53fdbe6): gauges
    # tgi_batch_current_size ("Current batch size") and tgi_queue_size ("Current queue size"); it exports no KV-cache
    # usage, preemptions or prefix-cache figures.
    ServerNames("tgi",
                requests_running=("tgi_batch_current_size",),
                requests_waiting=("tgi_queue_size",)),
    # transformers serve (5.17, transformers/cli/serving/server.py) has no /metrics route: nothing to map.
)
KNOWN = frozenset(name for names in SERVERS for name in names.names())
MAX_PAGE_BYTES = 16 << 20  # a page beyond this is refused, not parsed


@dataclass(frozen=True, slots=True)
class ServerReading:
    """One scrape in benchd's terms; None where the server does not export the figure. Over several label sets
    (engines, models, data-parallel ranks): gauges of requests and counters are summed, the KV-cache usage and a
    hit-rate gauge averaged (the mean of equal caches is the share of all blocks in use)."""

    server: str
    kv_cache_usage: float | None = None
    requests_running: float | None = None
    requests_waiting: float | None = None
    preemptions_total: float | None = None  # counters: cumulative since the server started
    prefix_hits_total: float | None = None
    prefix_queries_total: float | None = None
    prefix_hit_rate: float | None = None  # the server's own gauge (no counters)


class PageError(ValueError):
    """The page is not Prometheus text, or names nothing benchd knows."""


def samples(text: str) -> dict[str, list[float]]:
    """The values of every known sample name on the page, one per label set. Only lines of known names are parsed:
    the rest of a page (vLLM's histograms are most of it) costs a prefix test, and cannot break the parse."""
    lines = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
            if line[:end] in KNOWN:
                lines.append(line)
    found: dict[str, list[float]] = {}
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                found.setdefault(sample.name, []).append(float(sample.value))
    except (ValueError, IndexError, KeyError, TypeError) as error:  # the parser's ways of refusing a line
        raise PageError(f"not Prometheus text: {error}") from None
    return found


def _first(found: dict[str, list[float]], names: tuple[str, ...], mean: bool = False) -> float | None:
    for name in names:
        values = found.get(name)
        if values:
            return sum(values) / len(values) if mean else sum(values)
    return None


def read(text: str) -> ServerReading:
    """The page's figures under the first server of SERVERS whose names it holds."""
    found = samples(text)
    for names in SERVERS:
        if any(name in found for name in names.names()):
            return ServerReading(
                server=names.server,
                kv_cache_usage=_first(found, names.kv_cache_usage, mean=True),
                requests_running=_first(found, names.requests_running),
                requests_waiting=_first(found, names.requests_waiting),
                preemptions_total=_first(found, names.preemptions),
                prefix_hits_total=_first(found, names.prefix_hits),
                prefix_queries_total=_first(found, names.prefix_queries),
                prefix_hit_rate=_first(found, names.prefix_hit_rate, mean=True))
    raise PageError("no metric of a known server (vLLM, SGLang, TGI) on the page")


def increase(before: float | None, after: float | None) -> float | None:
    """A counter's increase between two readings; after a reset (the server restarted) the new value is the
    increase, as Prometheus' rate() takes it."""
    if before is None or after is None:
        return None
    return after - before if after >= before else after


def hit_rate(before: ServerReading, after: ServerReading) -> float | None:
    """Prompt tokens found in the prefix cache / looked up, between two reads (None when none were looked up); the
    server's own gauge at `after` when it exports no counters."""
    queries = increase(before.prefix_queries_total, after.prefix_queries_total)
    hits = increase(before.prefix_hits_total, after.prefix_hits_total)
    if queries is not None and hits is not None:
        return hits / queries if queries > 0 else None
    return after.prefix_hit_rate
