"""Service-level objectives: per request (is this request good?) and per stage (do its percentiles meet them?)."""

from __future__ import annotations

from pydantic import model_validator

from benchd.spec.fields import Fraction, PositiveFloat, Strict

# The stage-level objectives: p99 of each latency over the stage's measured requests that succeeded.
PERCENTILE_OBJECTIVES = {"ttft_p99_s": ("TTFT", "ttft_s"), "tpot_p99_s": ("TPOT", "tpot_s"),
                         "itl_p99_s": ("ITL", "itl_s"), "e2e_p99_s": ("E2E", "e2e_s")}


class SLO(Strict):
    """Per request, ttft_s and tpot_s: a request is good when it succeeded and meets each one set. Per stage, the p99
    objectives and max_error_rate: the stage meets its SLO when each p99 set is within its bound and at most that
    fraction of its measured requests failed. Goodput counts the good requests of a stage that meets its SLO, and is
    0 for one that does not."""

    ttft_s: PositiveFloat | None = None
    """Per request: a good request's TTFT is at most this, in seconds."""
    tpot_s: PositiveFloat | None = None
    """Per request: a good request's TPOT is at most this, in seconds."""
    ttft_p99_s: PositiveFloat | None = None
    """Per stage: TTFT p99 at most this, in seconds."""
    tpot_p99_s: PositiveFloat | None = None
    """Per stage: TPOT p99 at most this, in seconds."""
    itl_p99_s: PositiveFloat | None = None
    """Per stage: ITL p99 at most this, in seconds."""
    e2e_p99_s: PositiveFloat | None = None
    """Per stage: E2E p99 at most this, in seconds."""
    max_error_rate: Fraction | None = None
    """Per stage: at most this share of its measured requests failed."""

    @model_validator(mode="after")
    def _any(self) -> SLO:
        if not self.per_request and not self.per_stage:
            raise ValueError("set at least one objective: ttft_s, tpot_s (per request), ttft_p99_s, tpot_p99_s, "
                             "itl_p99_s, e2e_p99_s or max_error_rate (per stage)")
        return self

    @property
    def per_request(self) -> bool:
        return self.ttft_s is not None or self.tpot_s is not None

    @property
    def per_stage(self) -> bool:
        return self.max_error_rate is not None or any(getattr(self, k) is not None for k in PERCENTILE_OBJECTIVES)


def misses(slo: SLO, p99: dict[str, float | None], errors: int, finished: int) -> list[str]:
    """The stage objectives not met, each as a sentence; p99: the stage's p99 by latency name (ttft_s, …). A p99
    with no observation misses its objective: nothing shows it was met."""
    out = []
    for key, (name, latency) in PERCENTILE_OBJECTIVES.items():
        bound = getattr(slo, key)
        if bound is None:
            continue
        value = p99.get(latency)
        if value is None:
            out.append(f"{name} p99: no measured request to show it within {bound * 1e3:g} ms")
        elif value > bound:
            out.append(f"{name} p99 {value * 1e3:.1f} ms over {bound * 1e3:g} ms")
    if slo.max_error_rate is not None:
        rate = errors / finished if finished else None
        if rate is None:
            out.append("error rate: no measured request finished")
        elif rate > slo.max_error_rate:
            out.append(f"error rate {rate:.1%} ({errors} of {finished}) over {slo.max_error_rate:.1%}")
    return out
