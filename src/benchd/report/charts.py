"""SVG charts drawn on the server for the HTML pages: distributions (CDF, log axis), lines over time, requests."""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# Paul Tol's "bright" scheme: distinguishable for colour-blind readers, and in print.
PALETTE = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")
WIDTH, HEIGHT = 560, 240
LEFT, RIGHT, TOP, BOTTOM = 58, 14, 10, 30  # plot margins, px
CDF_POINTS = 400  # quantiles a distribution's line is drawn through
LINE_POINTS = 600  # points a series is drawn with at most (min and max of each bucket beyond that)
TIMELINE_ROWS = 600  # requests drawn at most in a request timeline

Format = Callable[[float], str]
Band = tuple[float, float, str]  # a stage on a time axis: start, end, label


def seconds(v: float) -> str:
    """A duration in the unit that reads best: 850 µs, 12 ms, 1.5 s."""
    a = abs(v)
    if a == 0:
        return "0"
    if a < 1e-3:
        return f"{v * 1e6:.3g} µs"
    if a < 1:
        return f"{v * 1e3:.3g} ms"
    return f"{v:.3g} s"


def number(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def percent(v: float) -> str:
    """0.5 → 50%, 0.02 → 2%, 0.005 → 0.5%: an axis of a few percent keeps its ticks apart."""
    return f"{v * 100:.3g}%"


def unit(suffix: str) -> Format:
    return lambda v: f"{v:.3g} {suffix}"


def clock(v: float) -> str:
    return f"{v:g} s"


@dataclass(slots=True, frozen=True)
class Scale:
    """Maps [lo, hi] onto pixels [a, b], linearly or by log10."""

    lo: float
    hi: float
    a: float
    b: float
    log: bool = False

    def __call__(self, v):
        if self.log:
            f = (np.log10(v) - math.log10(self.lo)) / (math.log10(self.hi) - math.log10(self.lo))
        else:
            f = (np.asarray(v, dtype=np.float64) - self.lo) / (self.hi - self.lo)
        return self.a + f * (self.b - self.a)

    def ticks(self) -> list[float]:
        if self.log:
            first, last = math.floor(math.log10(self.lo)), math.ceil(math.log10(self.hi))
            steps = (1,) if last - first > 3 else (1, 2, 5)
            return [m * 10.0**e for e in range(first, last + 1) for m in steps if self.lo <= m * 10.0**e <= self.hi]
        step = nice_step((self.hi - self.lo) / 5)
        start = math.ceil(self.lo / step) * step
        return [round(start + i * step, 12) for i in range(int((self.hi - start) / step + 1e-9) + 1)]


def nice_step(raw: float) -> float:
    """The 1-2-5 step nearest above raw."""
    if raw <= 0 or not math.isfinite(raw):
        return 1.0
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def linear(lo: float, hi: float, a: float, b: float, pad: float = 0.0) -> Scale:
    if not hi > lo:
        lo, hi = (lo - 1, hi + 1) if lo == hi else (0.0, 1.0)
    span = hi - lo
    return Scale(lo - span * pad, hi + span * pad, a, b)


def rounded(lo: float, hi: float, a: float, b: float) -> Scale:
    """A linear scale from and to whole 1-2-5 steps around [lo, hi]."""
    if not hi > lo:
        hi = lo + (abs(lo) or 1.0)
    step = nice_step((hi - lo) / 5)
    return Scale(math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step, a, b)


def _esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def figure(name: str, title: str, svg: str, legend: Sequence[tuple[str, str]] = (), note: str | None = None) -> str:
    """A chart with its title, colour keys and a note under it (what was left out or how it was drawn)."""
    keys = "".join(f'<span class="key"><i style="background:{c}"></i>{_esc(label)}</span>' for label, c in legend)
    return (f'<figure class="chart" data-chart="{_esc(name)}"><figcaption><b>{_esc(title)}</b>{keys}</figcaption>'
            f'{svg}{f"<p class=note>{_esc(note)}</p>" if note else ""}</figure>')


def empty(name: str, title: str, note: str) -> str:
    """A panel with nothing to draw, saying why."""
    return (f'<figure class="chart empty" data-chart="{_esc(name)}"><figcaption><b>{_esc(title)}</b></figcaption>'
            f'<p class="note">{_esc(note)}</p></figure>')


def frame(x: Scale, y: Scale, fx: Format, fy: Format, x_label: str, body: str, height: int = HEIGHT,
           y_ticks: Sequence[float] | None = None, width: int = WIDTH) -> str:
    """The svg: horizontal grid and y labels, x ticks and labels, the body, the x axis's name."""
    kind = "plot wide" if width > WIDTH else "plot"
    parts = [f'<svg class="{kind}" viewBox="0 0 {width} {height}" role="img">']
    for v in (y.ticks() if y_ticks is None else y_ticks):
        py = float(y(v))
        parts.append(f'<line class="gridline" x1="{LEFT}" x2="{width - RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>'
                     f'<text class="tick" x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{_esc(fy(v))}</text>')
    bottom = height - BOTTOM
    for v in x.ticks():
        px = float(x(v))
        parts.append(f'<line class="axis" x1="{px:.1f}" x2="{px:.1f}" y1="{bottom}" y2="{bottom + 4}"/>'
                     f'<text class="tick" x="{px:.1f}" y="{bottom + 16}" text-anchor="middle">{_esc(fx(v))}</text>')
    parts.append(f'<line class="axis" x1="{LEFT}" x2="{width - RIGHT}" y1="{bottom}" y2="{bottom}"/>{body}'
                 f'<text class="label" x="{width - RIGHT}" y="{height - 2}" text-anchor="end">{_esc(x_label)}</text>'
                 '</svg>')
    return "".join(parts)


def polyline(xs: np.ndarray, ys: np.ndarray) -> str:
    """A polyline through the points; a NaN breaks it."""
    out, pen = [], "M"
    for px, py in zip(xs.tolist(), ys.tolist()):
        if math.isnan(px) or math.isnan(py):
            pen = "M"
            continue
        out.append(f"{pen}{px:.1f} {py:.1f}")
        pen = "L"
    return "".join(out)


# ---- distributions -------------------------------------------------------------------------------


def cdf(name: str, title: str, series: Sequence[tuple[str, Sequence[float | None] | np.ndarray]],
        unit: Format = seconds, x_label: str = "") -> str:
    """Each series' cumulative distribution; log x when the values span more than a decade. Large series are drawn
    through CDF_POINTS quantiles (exact at each of them), small ones step by step. A value that is None or not
    finite is left out."""
    arrays = [(label, np.sort(np.asarray(v, dtype=np.float64))) for label, v in series]
    arrays = [(label, v[np.isfinite(v)]) for label, v in arrays]
    drawn = [(label, v) for label, v in arrays if len(v)]
    if not drawn:
        return empty(name, title, "no observations: no measured request succeeded")
    values = np.concatenate([v for _, v in drawn])
    lo, hi = float(values.min()), float(values.max())
    positive = values[values > 0]
    # A log axis starts at the lowest positive value, or half the 0.1 % quantile when a few values lie far below
    # (gaps of a few ns between tokens stamped together): those are drawn at its left end, and the note says so.
    floor = max(float(positive.min()), float(np.quantile(positive, 0.001)) / 2) if len(positive) else 0.0
    log = floor > 0 and hi / floor > 10
    if log:
        x = Scale(floor / 1.15, hi * 1.15, LEFT, WIDTH - RIGHT, log=True)
        below = int((values < floor).sum())
    else:
        x = linear(lo, hi, LEFT, WIDTH - RIGHT, 0.04)
    y = Scale(0.0, 1.0, HEIGHT - BOTTOM, TOP)
    body, legend, thinned = [], [], False
    for p in (0.5, 0.99):
        py = float(y(p))
        body.append(f'<line class="guide" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py:.1f}" y2="{py:.1f}"/>'
                    f'<text class="guide-label" x="{LEFT + 3}" y="{py + (10 if p > 0.95 else -3):.1f}">'
                    f'p{p * 100:g}</text>')
    for i, (label, v) in enumerate(drawn):
        color = PALETTE[i % len(PALETTE)]
        n = len(v)
        if n > CDF_POINTS:
            thinned = True
            q = np.linspace(0, 1, CDF_POINTS)
            xs, ys = np.quantile(v, q), q
        else:  # a step up of 1/n at each observation
            xs, ys = np.repeat(v, 2), np.concatenate([[0], np.repeat(np.arange(1, n) / n, 2), [1]])
        p50, p99 = (unit(float(q)) for q in np.percentile(v, (50, 99)))
        xs = np.maximum(xs, x.lo) if log else xs
        body.append(f'<path class="mark line" stroke="{color}" d="{polyline(x(xs), y(ys))}">'
                    f'<title>{_esc(label)}: p50 {p50}, p99 {p99}, n={n:,}</title></path>')
        legend.append((f"{label} (n={n:,})", color))
    notes = ["log axis" + (f" ({below:,} values below {unit(floor)} drawn at its left end)" if log and below else "")
             if log else "", f"lines drawn through {CDF_POINTS} quantiles" if thinned else ""]
    note = "; ".join(n for n in notes if n)
    svg = frame(x, y, unit, percent, x_label, "".join(body), y_ticks=(0, 0.25, 0.5, 0.75, 1.0))
    return figure(name, title, svg, legend, note or None)


# ---- lines over time -----------------------------------------------------------------------------


@dataclass(slots=True)
class Line:
    label: str
    t: Sequence[float]
    values: Sequence[float | None]
    color: str | None = None
    dashed: bool = False


def decimate(t: np.ndarray, v: np.ndarray, points: int = LINE_POINTS) -> tuple[np.ndarray, np.ndarray, bool]:
    """At most about `points` points: beyond that, each bucket of samples keeps its lowest and highest (in time
    order), so peaks survive. NaN (no sample) stays, to break the line."""
    n = len(t)
    if n <= points:
        return t, v, False
    size = math.ceil(n / (points // 2))
    keep: list[int] = []
    for start in range(0, n, size):
        chunk = v[start:start + size]
        if np.isnan(chunk).all():
            keep.append(start)
            continue
        keep.extend(sorted({start + int(np.nanargmin(chunk)), start + int(np.nanargmax(chunk))}))
    return t[keep], v[keep], True


def lines(name: str, title: str, series: Sequence[Line], fy: Format, bands: Sequence[Band] = (),
          y_min: float | None = 0.0, y_max: float | None = None, x_label: str = "seconds from the run's start",
          fx: Format = clock, markers: bool = False, note: str | None = None, log_y: bool | None = False) -> str:
    """Series against time (or any x), on one y axis, with stages shaded behind them; log_y None: a log axis when
    every value is positive and they span more than a decade and a half."""
    data = []
    for s in series:
        t = np.asarray(s.t, dtype=np.float64)
        v = np.asarray([np.nan if x is None else x for x in s.values], dtype=np.float64)
        if len(t) and np.isfinite(v).any():
            data.append((s, t, v))
    if not data:
        return empty(name, title, note or "no samples")
    ts = [b for band in bands for b in band[:2]] + [float(t.min()) for _, t, _ in data] + \
         [float(t.max()) for _, t, _ in data]
    values = np.concatenate([v[np.isfinite(v)] for _, _, v in data])
    x = linear(min(ts), max(ts), LEFT, WIDTH - RIGHT)
    lo = float(values.min()) if y_min is None else min(y_min, float(values.min()))
    hi = float(values.max()) if y_max is None else max(y_max, float(values.max()))
    positive = float(values.min()) > 0
    if log_y is None:
        log_y = positive and float(values.max()) / float(values.min()) > 30
    if log_y and positive:
        y = Scale(float(values.min()) / 1.2, float(values.max()) * 1.2, HEIGHT - BOTTOM, TOP, log=True)
        note = (note + "; " if note else "") + "log axis"
    else:
        y = rounded(lo, hi, HEIGHT - BOTTOM, TOP)
    body, legend, thinned = [_bands(x, bands, HEIGHT)], [], False
    for i, (s, t, v) in enumerate(data):
        color = s.color or PALETTE[i % len(PALETTE)]
        t, v, cut = decimate(t, v)
        thinned |= cut
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        body.append(f'<path class="mark line" stroke="{color}"{dash} d="{polyline(x(t), y(v))}"/>')
        if markers or np.isfinite(v).sum() < 3:  # a line through one or two points hardly shows
            body.extend(f'<circle class="mark" cx="{px:.1f}" cy="{py:.1f}" r="2.2" fill="{color}"/>'
                        for px, py in zip(x(t).tolist(), y(v).tolist()) if not math.isnan(py))
        legend.append((s.label, color))
    if thinned:
        thinned_note = f"long series drawn with the low and high of each of {LINE_POINTS // 2} buckets"
        note = f"{note}; {thinned_note}" if note else thinned_note
    return figure(name, title, frame(x, y, fx, fy, x_label, "".join(body)), legend, note)


CHAR_PX = 6.2  # the width of an 11 px label's character, about (DejaVu Sans, the pages' fallback font)


def fitted(label: str, room: float) -> str:
    """A stage's label as it fits its band: whole, else its value alone (concurrent=16 → 16, poisson@20/s → 20/s),
    else nothing (its band's tooltip still names it)."""
    for text in (label, label.split(" · ")[0].rsplit("=", 1)[-1].rsplit("@", 1)[-1]):
        if len(text) * CHAR_PX <= room:
            return text
    return ""


def _bands(x: Scale, bands: Sequence[Band], height: int) -> str:
    """Stages shaded in turn behind the data, each named at its top left."""
    out = []
    for i, (start, end, label) in enumerate(bands):
        x0, x1 = float(x(start)), float(x(end))
        shade = "band" if i % 2 == 0 else "band alt"
        out.append(f'<rect class="{shade}" x="{x0:.1f}" y="{TOP}" width="{max(x1 - x0, 0.5):.1f}" '
                   f'height="{height - BOTTOM - TOP}"><title>{_esc(label)}</title></rect>')
        if len(bands) > 1 and (shown := fitted(label, x1 - x0 - 6)):
            out.append(f'<text class="band-label" x="{x0 + 3:.1f}" y="{TOP + 10}">{_esc(shown)}</text>')
    return "".join(out)


# ---- requests ------------------------------------------------------------------------------------

TIMELINE_KEYS = (("queued", "#8c94a3"), ("waiting for the first token", "#ee9944"), ("generating", "#4477aa"),
                 ("failed", "#cc3311"), ("warm-up", "#c4c9d2"))


@dataclass(slots=True, frozen=True)
class Span:
    """One request on the run's axis, seconds from the run's start."""

    scheduled: float
    admitted: float | None
    first: float | None
    last: float | None
    end: float | None  # finished
    state: str  # measured | failed | warm-up


def timeline(name: str, title: str, spans: Sequence[Span], bands: Sequence[Band] = (),
             note: str | None = None) -> str:
    """One row per request in order of its scheduled time: queued (scheduled → admitted), waiting for its first
    token, generating (first → last token); warm-up requests greyed, failed ones red."""
    if not spans:
        return empty(name, title, note or "no requests")
    spans = sorted(spans, key=lambda s: s.scheduled)
    total, stride = len(spans), math.ceil(len(spans) / TIMELINE_ROWS)
    spans = spans[::stride]
    width, height = 2 * WIDTH, 320
    ends = [t for s in spans for t in (s.last, s.end, s.first, s.admitted) if t is not None]
    x = linear(min([s.scheduled for s in spans] + [b[0] for b in bands]),
               max(ends + [s.scheduled for s in spans] + [b[1] for b in bands]), LEFT, width - RIGHT)
    row = (height - BOTTOM - TOP) / len(spans)
    y = Scale(0, total, TOP, height - BOTTOM)  # requests, in order of scheduled time
    paths: dict[str, list[str]] = {key: [] for key, _ in TIMELINE_KEYS}
    for i, s in enumerate(spans):
        py = f"{TOP + (i + 0.5) * row:.1f}"

        def seg(key: str, a: float | None, b: float | None, py: str = py) -> None:
            if a is not None and b is not None and b >= a:
                paths[key].append(f"M{float(x(a)):.1f} {py}H{max(float(x(b)), float(x(a)) + 0.8):.1f}")

        if s.state == "warm-up" or s.state == "failed":
            seg(s.state, s.scheduled, max(t for t in (s.scheduled, s.last, s.end) if t is not None))
            continue
        admitted = s.admitted if s.admitted is not None else s.first
        seg("queued", s.scheduled, admitted)
        seg("waiting for the first token", admitted, s.first)
        seg("generating", s.first, s.last)
    stroke = max(0.6, min(row * 0.8, 6))
    body = [_bands(x, bands, height)]
    legend = []
    for key, color in TIMELINE_KEYS:
        if paths[key]:
            body.append(f'<path class="mark bar" stroke="{color}" stroke-width="{stroke:.2f}" '
                        f'd="{"".join(paths[key])}"><title>{_esc(key)}</title></path>')
            legend.append((key, color))
    svg = frame(x, y, clock, lambda v: f"{int(v):,}", "seconds from the run's start", "".join(body), height,
                 [t for t in y.ticks() if t == int(t)], width)
    if stride > 1:
        drawn = f"{len(spans):,} of {total:,} requests drawn (one in {stride})"
        note = f"{note}; {drawn}" if note else drawn
    return figure(name, title, svg, legend, note)
