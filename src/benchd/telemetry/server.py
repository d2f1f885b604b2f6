"""A run's benchd_server_* gauges: what the daemon read of its server's Prometheus page (daemon/server_scrape.py)."""

from __future__ import annotations

from benchd.measure.server_metrics import ServerReading, hit_rate, increase
from benchd.telemetry.metrics import Metrics


class ServerGauges:
    """A run's benchd_server_* children, bound once (labels as every run series: model, engine, workload, gpu)."""

    def __init__(self, metrics: Metrics, labels: tuple[str, ...]) -> None:
        self.kv = metrics.server_kv_usage.labels(*labels)
        self.running = metrics.server_running.labels(*labels)
        self.waiting = metrics.server_waiting.labels(*labels)
        self.preemptions = metrics.server_preemptions.labels(*labels)
        self.hit_rate = metrics.server_prefix_hit_rate.labels(*labels)
        self.scraped = metrics.server_scraped.labels(*labels)
        self.failures = metrics.server_scrape_failures.labels(*labels)

    def failed(self) -> None:
        self.failures.inc()

    def update(self, first: ServerReading, latest: ServerReading) -> None:
        """Gauges as of the latest read; preemptions and the counters' hit rate since the run's first read."""
        for gauge, value in ((self.kv, latest.kv_cache_usage), (self.running, latest.requests_running),
                             (self.waiting, latest.requests_waiting),
                             (self.preemptions, increase(first.preemptions_total, latest.preemptions_total)),
                             (self.hit_rate, hit_rate(first, latest))):
            if value is not None:
                gauge.set(value)
        self.scraped.set_to_current_time()
