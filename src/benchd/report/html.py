"""The HTML pages' parts: their style, the shell around sections, sections, tables and chart grids (self-contained:
inline CSS, nothing fetched)."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from benchd.report.charts import WIDTH

# Charts are drawn WIDTH user units wide: shown at most 1.15× that (a one-column grid on a narrow page would scale
# their 11-unit text past the page's 14 px); the request timeline, drawn twice as wide, at 0.85 to 1.15× its own
# width (on a narrow page it scrolls in its box rather than shrink its text below 9 px).
STYLE = f"""
:root{{--fg:#1d2433;--muted:#5b6475;--line:#e3e6ec}}
*{{box-sizing:border-box}}
body{{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);
background:#f4f5f8}}
header{{background:#1d2433;color:#fff;padding:16px 28px}}
header h1{{margin:0;font-size:20px;font-weight:600;overflow-wrap:anywhere}}
header .meta{{color:#c5cbd6;margin-top:4px;font-size:13px;overflow-wrap:anywhere}} nav{{margin-top:6px}}
header a,nav a{{color:#9fc3ff;text-decoration:none}}
main{{max-width:1240px;margin:0 auto;padding:4px 24px 40px}}
section{{background:#fff;border:1px solid var(--line);border-radius:8px;padding:14px 18px;margin:16px 0;min-width:0}}
h2{{font-size:15px;margin:0 0 10px;display:inline-block}} .about{{color:var(--muted);font-size:12px;margin-left:8px}}
.charts{{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(480px,100%),1fr));gap:18px 24px}}
figure{{margin:0;min-width:0}} figcaption{{font-size:13px;margin-bottom:2px;display:flex;flex-wrap:wrap;gap:2px 12px;
align-items:baseline}} figcaption b{{margin-right:6px}}
.key{{color:var(--muted);font-size:12px}} .key i{{display:inline-block;width:10px;height:10px;border-radius:2px;
margin-right:4px;vertical-align:-1px}}
svg.plot{{width:100%;max-width:{round(WIDTH * 1.15)}px;height:auto;display:block;overflow:visible}}
svg.plot.wide{{max-width:{round(WIDTH * 2.3)}px;min-width:{round(WIDTH * 1.7)}px}}
figure.chart:has(svg.wide){{overflow-x:auto}}
.gridline{{stroke:#eceef2}} .axis{{stroke:#9aa1ad}}
.tick,.label,.guide-label,.band-label,.point-label{{fill:var(--muted);font-size:11px}}
.guide-label{{font-size:10px}} .line,.bar{{fill:none}} .line{{stroke-width:1.8;stroke-linejoin:round}}
.band{{fill:#f6f7fa}} .band.alt{{fill:#eaeef5}} .guide{{stroke:#c8ccd4;stroke-dasharray:3 3}}
.slo{{stroke:#cc3311;stroke-dasharray:6 3}} .slo-label{{fill:#cc3311;font-size:10px}}
.front{{fill:none;stroke:#1d2433;stroke-width:1.2;stroke-dasharray:2 2}}
.note{{color:var(--muted);font-size:12px;margin:4px 0 0}} .empty .note{{padding:24px 0;text-align:center}}
table{{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px}}
th,td{{padding:4px 10px;border-bottom:1px solid var(--line);text-align:right;vertical-align:top}}
th{{font-weight:600;background:#f6f7fa}}
th:first-child,td:first-child{{text-align:left;color:var(--muted)}}
td.text,th.text{{text-align:left;color:inherit}}
.wide{{overflow-x:auto;max-width:100%}}
div.wide{{background:
linear-gradient(to right,#fff 30%,#fff0) left/32px 100% no-repeat local,
linear-gradient(to left,#fff 30%,#fff0) right/32px 100% no-repeat local,
radial-gradient(farthest-side at 0 50%,#0003,#0000) left/12px 100% no-repeat scroll,
radial-gradient(farthest-side at 100% 50%,#0003,#0000) right/12px 100% no-repeat scroll}}
tr.detail td{{text-align:left;color:var(--muted);font-size:12px;padding-top:0}}
tr:has(+tr.detail) td{{border-bottom:0}}
table.verdicts td:last-child,table.verdicts th:last-child{{text-align:left}}
table.variants td:first-child{{min-width:120px;max-width:clamp(180px,24vw,320px);color:inherit}}
span.pair{{display:block}}
table.variants td,table.variants th{{padding:4px 6px}}
.pill{{display:inline-block;padding:0 9px;border-radius:10px;font-size:12px;font-weight:600;background:#dde3ee;
color:#1d2433}} .pill.succeeded{{background:#cdeed6;color:#17602a}} .pill.failed{{background:#f9d3cd;color:#9b2317}}
.error{{color:#9b2317}} .warning{{background:#fff4d6;border-color:#f0d58c}}
.verdict{{display:inline-block;padding:0 7px;border-radius:9px;font-weight:600;white-space:nowrap}}
.slower,.larger{{background:#f9d3cd;color:#9b2317}} .faster,.smaller{{background:#cdeed6;color:#17602a}}
.equivalent{{background:#e7eaf0;color:#3d4657}} .inconclusive{{background:#fff0c2;color:#7a5a00}}
.n-a{{background:none;color:var(--muted);font-weight:400}}
span.chg{{display:block;font-size:12px;font-weight:400}}
tr.differs td{{font-weight:600}}
details pre{{background:#f6f7fa;padding:10px;border-radius:6px;overflow-x:auto;font-size:12px}}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def verdict_class(verdict: str) -> str:
    """The CSS class of a verdict word (slower, equivalent, n/a…)."""
    return re.sub(r"[^a-z]+", "-", verdict.lower()).strip("-")


def verdict_pill(verdict: str, mark: str = "") -> str:
    return f'<span class="verdict {verdict_class(verdict)}">{esc(verdict)}</span>{esc(mark)}'


def shell(title: str, heading: str, meta: str, sections: Sequence[str]) -> str:
    """The page around its sections, with a link to each section that has an id. heading and meta: HTML."""
    anchors = re.findall(r"<section id=(\w+)[^>]*><h2>([^<]*)</h2>", "".join(sections))
    links = " · ".join(f'<a href="#{a}">{t}</a>' for a, t in anchors)
    meta += f'<nav>{links}</nav>' if links else ""
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{esc(title)}</title><style>{STYLE}</style></head><body>'
            f'<header><h1>{heading}</h1><div class="meta">{meta}</div></header><main>{"".join(sections)}</main>'
            '</body></html>')


def section(title: str, *parts: str, anchor: str = "", about: str = "", kind: str = "") -> str:
    about = f' <span class="about">{esc(about)}</span>' if about else ""
    attributes = (f" id={anchor}" if anchor else "") + (f' class="{kind}"' if kind else "")
    return f'<section{attributes}><h2>{esc(title)}</h2>{about}{"".join(parts)}</section>'


def table(head: Sequence[str], rows: Sequence[Sequence[object]], text_columns: int = 1,
          raw: bool = False, row_class: Sequence[str] | None = None, kind: str = "",
          details: Sequence[str] | None = None) -> str:
    """Cells past the first text_columns are figures (right-aligned); raw: the cells are HTML already; kind: the
    table's class (verdicts: its last column, the verdict, left-aligned); details: a line of text under each row,
    across the table (what is too long for a column of its own)."""
    cell = (lambda c: str(c)) if raw else esc
    th = ("<tr>" + "".join(f'<th{" class=text" if 0 < i < text_columns else ""}>{esc(h)}</th>'
                           for i, h in enumerate(head)) + "</tr>") if any(head) else ""
    body = "".join(
        f'<tr{f" class={row_class[n]}" if row_class and row_class[n] else ""}>'
        + "".join(f'<td{" class=text" if 0 < i < text_columns else ""}>{cell(c)}</td>' for i, c in enumerate(row))
        + "</tr>" + (f'<tr class=detail><td colspan={len(row)}>{esc(details[n])}</td></tr>' if details else "")
        for n, row in enumerate(rows))
    return f'<div class="wide"><table{f" class={kind}" if kind else ""}>{th}{body}</table></div>'


def charts(*figures: str) -> str:
    return f'<div class="charts">{"".join(figures)}</div>'


def notes(lines: Sequence[str], kind: str = "note") -> str:
    return "".join(f'<p class="{kind}">{esc(line)}</p>' for line in lines)
