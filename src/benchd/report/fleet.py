"""The fleet's page (GET /fleet?format=html): for each workload and GPU model, the distribution across its nodes,
each node's place with its interval and verdict, the outliers with what sets them apart, what a good token costs,
and the change points told the node's or the fleet's."""

from __future__ import annotations

import re

from benchd.measure.fleet import FIGURES, FleetGroup, NodePlace
from benchd.measure.fleet_changes import FleetChange, FleetReport
from benchd.report.history import value as figure_value
from benchd.report.html import esc, section, shell, table, verdict_pill


def value(name: str, v: float | None) -> str:
    """A fleet figure as the history's pages write it (a fraction as a percentage)."""
    unit = FIGURES[name].unit if name in FIGURES else ""
    return f"{v:.1%}" if unit == "" and v is not None else figure_value(unit, v)


def money(v: float | None, currency: str | None) -> str:
    return "–" if v is None else f"{v:,.4g} {currency or ''}".strip()


PLACE_HEAD = ["node", "runs", "output tok/s per GPU", "÷ fleet [interval]", "verdict", "ITL p50", "TTFT p99",
              "energy / good token", "cost / M good tokens", "what sets it apart"]


def _place_row(p: NodePlace, currency: str | None) -> list[str]:
    decision = p.decisions.get("output_tokens_per_s")
    ratio = f"{p.relative.get('output_tokens_per_s', 0):.3f}" if "output_tokens_per_s" in p.relative else "–"
    if decision is not None and decision.ci_low is not None:
        ratio += f" [{decision.ci_low:.3f}, {decision.ci_high:.3f}]"
    verdict = "slower" if p.outlier else decision.verdict if decision is not None else "n/a"
    apart = [*p.reasons, *(s.says() for s in p.stack), *p.state]
    excluded = f" ({p.excluded} invalid left out)" if p.excluded else ""
    return [esc(p.node), f"{p.runs}{excluded}", value("output_tokens_per_s", p.values.get("output_tokens_per_s")),
            esc(ratio), verdict_pill(verdict), value("itl_s.p50", p.values.get("itl_s.p50")),
            value("ttft_s.p99", p.values.get("ttft_s.p99")), value("energy_per_token_j", p.energy_per_good_token_j),
            esc(money(p.cost_per_million_good_tokens, currency)), esc("; ".join(apart) or "–")]


def _group(g: FleetGroup, currency: str | None) -> str:
    quantiles = ("0", "0.1", "0.25", "0.5", "0.75", "0.9", "1")
    spread = table(["figure", "nodes", "lowest", "p10", "p25", "median", "p75", "p90", "highest"],
                   [[FIGURES[name].name, d.nodes, *(value(name, d.quantiles.get(q)) for q in quantiles)]
                    for name, d in g.distribution.items()])
    places = table(PLACE_HEAD, [_place_row(p, currency) for p in g.places], text_columns=1, raw=True,
                   row_class=["outlier" if p.outlier else "" for p in g.places])
    cost = (f"; the fleet's energy per good token {value('energy_per_token_j', g.energy_per_good_token_j)}, "
            f"cost per million good tokens {money(g.cost_per_million_good_tokens, currency)}")
    about = (f"{g.nodes} nodes, {g.runs} runs; outliers: {', '.join(g.outliers) or 'none'}" + cost)
    anchor = "g" + re.sub(r"\W", "_", f"{g.workload}_{g.device}")
    return section(f"{g.workload} on {g.device}", '<h3>Each node</h3>', places,
                   '<h3>Across the nodes (each node: the median of its runs)</h3>', spread, anchor=anchor,
                   about=about)


def _changes(changes: list[FleetChange]) -> str:
    rows = [[f"{c.at:%Y-%m-%d %H:%M}", c.workload, c.device, FIGURES[c.figure].name if c.figure in FIGURES
             else c.figure, c.scope, f"{len(c.nodes)} of {c.nodes_seen}", f"{c.relative_change:+.1%}", c.direction,
             c.explanation] for c in changes]
    head = ["when", "workload", "GPU model", "figure", "node or fleet", "nodes", "change", "direction", "why"]
    return section("Node or stack", table(head, rows, text_columns=len(head)) if rows else
                   '<p class="note">no active change point</p>', anchor="changes",
                   about="change points of one figure on one GPU model's nodes at about the same time, put together")


def fleet_page(report: FleetReport) -> str:
    meta = esc(f"each node's newest runs (at most 20) against the median of the other nodes of its GPU model; a node "
               f"is flagged when decided worse by more than {report.effect:.0%} (confidence {report.confidence:.0%} "
               "over its runs as looks; docs/guides/fleet.md)")
    sections = [_group(g, report.currency) for g in report.groups] or [
        section("No runs", '<p class="note">no node has a run in the fleet\'s window</p>')]
    return shell("benchd · fleet", "benchd · fleet", meta, [*sections, _changes(report.changes)])
