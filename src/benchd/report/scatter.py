"""Charts of points: throughput against latency across a sweep's stages or a matrix's variants (the SLO and the
Pareto front marked), and the roofline (each stage under the device's measured ceilings)."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchd.report.charts import (
    BOTTOM,
    HEIGHT,
    LEFT,
    PALETTE,
    RIGHT,
    TOP,
    WIDTH,
    Scale,
    empty,
    figure,
    frame,
    number,
    polyline,
    rounded,
    seconds,
)

RING = "#1d2433"  # a point on the Pareto front is ringed in the page's ink


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(slots=True, frozen=True)
class Point:
    """A stage or a variant: its output throughput, one latency figure, and whether it met the SLO (None: no SLO
    judged it); label: beside the point (a stage's, or a variant's index), name: in the key (its whole name)."""

    label: str
    throughput: float
    latency: float
    met: bool | None = None
    name: str | None = None


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other beats on both counts (more throughput and less latency), by throughput."""
    front = [p for p in points
             if not any(q.throughput >= p.throughput and q.latency <= p.latency
                        and (q.throughput, q.latency) != (p.throughput, p.latency) for q in points)]
    return sorted(front, key=lambda p: p.throughput)


def _span(values: list[float]) -> tuple[float, float]:
    """From zero, unless the values lie close together far from it (a matrix's variants of one throughput):
    then around them, a tenth of their span (or of their size) each side."""
    lo, hi = min(values), max(values)
    if lo <= 0.5 * hi:
        return 0.0, hi
    pad = 0.1 * ((hi - lo) or hi)
    return lo - pad, hi + pad


def _label(x: float, y: float, text: str, right_edge: float) -> str:
    """A point's name beside it: on its right, or on its left near the chart's right edge."""
    near = x > right_edge - 90
    return (f'<text class="point-label" x="{x + (-7 if near else 7):.1f}" y="{y - 5:.1f}" '
            f'text-anchor="{"end" if near else "start"}">{_esc(text)}</text>')


def tradeoff(name: str, title: str, points: Sequence[Point], latency_name: str, slo: float | None = None,
             slo_label: str = "SLO") -> str:
    """Latency (y) against output throughput (x), a point a stage or variant, named beside it; the Pareto front
    joined and ringed; the SLO's objective on this figure as a dashed line; a point that missed the SLO hollow."""
    points = [p for p in points if math.isfinite(p.throughput) and math.isfinite(p.latency)]
    if not points:
        return empty(name, title, "no stage or variant with both figures")
    front = pareto(points)
    xs = [p.throughput for p in points]
    ys = [p.latency for p in points] + ([slo] if slo is not None else [])
    x = rounded(*_span(xs), LEFT, WIDTH - RIGHT - 40)  # room on the right for the last point's label
    y = rounded(*_span(ys), HEIGHT - BOTTOM, TOP)
    body = []
    if slo is not None:
        py = float(y(slo))
        body.append(f'<line class="slo" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>'
                    f'<text class="slo-label" x="{WIDTH - RIGHT - 2}" y="{py - 4:.1f}" text-anchor="end">'
                    f'{_esc(slo_label)} {_esc(seconds(slo))}</text>')
    if len(front) > 1:
        line = polyline(x(np.array([p.throughput for p in front])), y(np.array([p.latency for p in front])))
        body.append(f'<path class="mark front" d="{line}"/>')
    on_front = {id(p) for p in front}
    for index, p in enumerate(points):
        color = PALETTE[index % (len(PALETTE) - 1)]
        px, py = float(x(p.throughput)), float(y(p.latency))
        fill = "#fff" if p.met is False else color
        ring = f' stroke="{RING}" stroke-width="1.5"' if id(p) in on_front else f' stroke="{color}" stroke-width="1.5"'
        state = {True: "; met the SLO", False: "; missed the SLO", None: ""}[p.met]
        placed = "; on the Pareto front" if id(p) in on_front else ""
        body.append(f'<circle class="mark" cx="{px:.1f}" cy="{py:.1f}" r="{5 if id(p) in on_front else 4}" '
                    f'fill="{fill}"{ring}><title>{_esc(p.name or p.label)}: {number(p.throughput)} tok/s, '
                    f'{latency_name} {seconds(p.latency)}{state}{placed}</title></circle>'
                    f'{_label(px, py, p.label, WIDTH - RIGHT)}')
    legend = [(p.name, PALETTE[i % (len(PALETTE) - 1)]) for i, p in enumerate(points) if p.name]
    legend.append(("on the Pareto front: ringed, joined", RING))
    if slo is not None:
        legend.append((f"{slo_label} (dashed)", "#cc3311"))
    missed = sum(p.met is False for p in points)
    note = f"hollow: missed the SLO ({missed} of {len(points)})" if missed else None
    svg = frame(x, y, number, seconds, "output tokens per second", "".join(body))
    return figure(name, title, svg, legend, note)


# ---- the roofline -------------------------------------------------------------------------------


def rate(value: float, unit: str) -> str:
    """A rate with its SI prefix: 120 GB/s, 1.2 TFLOP/s."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def roofline(name: str, title: str, points: Sequence[tuple[str, float, float]], peak_bytes_per_s: float,
             peak_flops_per_s: float) -> str:
    """Each stage a point, (arithmetic intensity, achieved FLOP/s), under the device's two ceilings, log-log: the
    bandwidth's slope (FLOP/s = intensity × B/s) up to the ridge, then the matmul rate (benchd.measure.roofline);
    each ceiling named with its value."""
    points = [(label, i, f) for label, i, f in points if i > 0 and f > 0]
    if not points or peak_bytes_per_s <= 0 or peak_flops_per_s <= 0:
        return empty(name, title, "no stage with steps its engine counted, or the device's limits unknown")
    ridge = peak_flops_per_s / peak_bytes_per_s
    x = Scale(min(ridge, *(i for _, i, _ in points)) / 4, max(ridge, *(i for _, i, _ in points)) * 4,
              LEFT, WIDTH - RIGHT, log=True)
    y = Scale(min(f for *_, f in points) / 4, peak_flops_per_s * 3, HEIGHT - BOTTOM, TOP, log=True)
    xs = np.array([x.lo, ridge, x.hi])
    ceiling = np.minimum(xs * peak_bytes_per_s, peak_flops_per_s)
    bandwidth, compute = rate(peak_bytes_per_s, "B/s"), rate(peak_flops_per_s, "FLOP/s")
    ridge_x, top = float(x(ridge)), float(y(peak_flops_per_s))
    body = [f'<path class="mark line" stroke="{PALETTE[6]}" d="{polyline(x(xs), y(np.maximum(ceiling, y.lo)))}">'
            f'<title>ceilings: {peak_bytes_per_s / 1e9:,.1f} GB/s, {peak_flops_per_s / 1e12:.3g} TFLOP/s; ridge at '
            f'{ridge:.3g} FLOP/byte</title></path>',
            f'<text class="point-label" x="{WIDTH - RIGHT - 2}" y="{top - 5:.1f}" text-anchor="end">'
            f'compute {_esc(compute)}</text>',
            f'<text class="point-label" x="{ridge_x - 6:.1f}" y="{top + 14:.1f}" text-anchor="end">'
            f'bandwidth {_esc(bandwidth)}, ridge {ridge:.3g} FLOP/B</text>']
    legend = [("ceilings (measured)", PALETTE[6])]
    for index, (label, intensity, flops) in enumerate(points):
        color = PALETTE[index % (len(PALETTE) - 1)]
        body.append(f'<circle class="mark" cx="{float(x(intensity)):.1f}" cy="{float(y(flops)):.1f}" r="4" '
                    f'fill="{color}"><title>{_esc(label)}: {intensity:.3g} FLOP/byte, {flops / 1e12:.3g} TFLOP/s'
                    '</title></circle>')
        legend.append((label, color))
    svg = frame(x, y, lambda v: f"{v:g}", lambda v: rate(v, "FLOP/s"), "arithmetic intensity, FLOP/byte",
                "".join(body))
    return figure(name, title, svg, legend, "log axes; each stage's steps as the model's shape costs them")
