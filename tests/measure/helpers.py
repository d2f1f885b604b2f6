"""What the measure tests share: hand-built records, simulated queues."""

import bisect
import random

import numpy as np

from benchd.measure.records import RequestRecord
from benchd.spec.validity import ValidityRules


def record(index, scheduled, submitted, arrivals=(0.1, 0.2), error=None, warmup=False):
    return RequestRecord(index=index, request_id=f"r{index}", warmup=warmup, prompt_tokens=4, max_new_tokens=2,
                         scheduled_s=scheduled, submitted_s=submitted,
                         arrival_s=[scheduled + a for a in arrivals] if error is None else [],
                         arrival_tokens=[1] * len(arrivals) if error is None else [],
                         finished_s=scheduled + arrivals[-1], error=error)


def checks(summary):
    return [i.check for i in summary.invalid]


NO_LAG = ValidityRules(max_dispatch_lag_ttft_share=None)  # lag is not judged


def served_records(arrivals, latency_s, servers=None, service_s=None, warmup=0):
    """Records of requests scheduled (and sent) at `arrivals`: each takes latency_s(i) from its scheduled time, or,
    with `servers`, waits first come first served for one of them and holds it service_s(i)."""
    free = [0.0] * (servers or 0)
    out = []
    for i, t in enumerate(arrivals):
        if servers:
            slot = min(range(servers), key=free.__getitem__)
            free[slot] = max(t, free[slot]) + service_s(i)
            end = free[slot]
        else:
            end = t + latency_s(i)
        out.append(RequestRecord(index=i, request_id=f"r{i}", warmup=i < warmup, prompt_tokens=4, max_new_tokens=1,
                                 scheduled_s=t, submitted_s=t, arrival_s=[end], arrival_tokens=[1], finished_s=end))
    return out


def poisson(rate, seconds, seed):
    rng, t, out = random.Random(seed), 0.0, []
    while (t := t + rng.expovariate(rate)) < seconds:
        out.append(t)
    return out

def queue_counts(rate, servers, service_s, seconds, seed):
    """(t, sent, finished) every 100 ms of a simulated queue: Poisson arrivals, exponential service on `servers`
    servers, first come first served (an M/M/c queue)."""
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    while t < seconds:
        t += rng.expovariate(rate)
        arrivals.append(t)
    free, ends = [0.0] * servers, []
    for a in arrivals:
        slot = min(range(servers), key=free.__getitem__)
        free[slot] = max(a, free[slot]) + rng.expovariate(1 / service_s)
        ends.append(free[slot])
    ends.sort()
    return [(i * 0.1, bisect.bisect_right(arrivals, i * 0.1), bisect.bisect_right(ends, i * 0.1))
            for i in range(int(seconds * 10))]


def noise(n: int, sd: float, seed: int) -> np.ndarray:
    """n log-normal factors around 1 (sd: of their logarithm), reproducible by seed."""
    return np.exp(np.random.default_rng(seed).normal(0, sd, n))
