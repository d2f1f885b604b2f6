"""`benchd fleet [WORKLOAD]`: each node's place among the nodes of its GPU model, the outliers with what sets them
apart, what a good token costs, and change points told the node's or the fleet's, through a daemon."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchd.cli import EXIT_FAILED, EXIT_OK
from benchd.cli.client import Client


def add_parser(commands, command) -> None:
    """command: the CLI's maker of a command (its global options before or after the name: --server, --debug)."""
    fleet = command(commands, "fleet", help="each node's place among the nodes of its GPU model (from the shared "
                                            "store), the outliers and why, and what a good token costs")
    fleet.add_argument("workload", nargs="?", help="one workload (default: every one in the fleet's window)")
    fleet.add_argument("--device", help="one GPU model (as its runs name it: NVIDIA H200, …)")
    fleet.add_argument("--node", help="one node's place (against every node's distribution)")
    fleet.add_argument("--fail-on-outlier", action="store_true",
                       help=f"exit {EXIT_FAILED} when a node is flagged (as --fail-on-regression does)")
    fleet.add_argument("--json", action="store_true", help="print GET /fleet as JSON")
    fleet.add_argument("--html", help="also write the fleet's page")
    fleet.set_defaults(handler=cmd_fleet)


def cmd_fleet(args: argparse.Namespace) -> int:
    from rich.table import Table
    from rich.text import Text

    from benchd.cli.terminal import echo, err, out
    from benchd.measure.fleet_changes import FleetReport
    from benchd.report.fleet import money, value

    client = Client(args.server)
    console = out()  # as wide as the terminal (COLUMNS, 120 piped); no markup: a node's name is shown as sent
    params = {k: v for k, v in (("workload", args.workload), ("device", args.device), ("node", args.node)) if v}
    found = client.get("/fleet", params=params, raw=args.json)
    if args.html:
        Path(args.html).write_text(client.text("/fleet", params={**params, "format": "html"}))
        err().print(f"wrote {args.html}")
    report = FleetReport.model_validate(found)
    if args.json:
        echo(json.dumps(found, indent=2))
    else:
        if not report.groups:
            echo("no node has a run in the fleet's window")
        for g in report.groups:
            table = Table(title=Text(f"{g.workload} on {g.device}: {g.nodes} nodes, {g.runs} runs; outliers: "
                                     f"{', '.join(g.outliers) or 'none'}"), title_justify="left")
            for column in ("node", "runs", "tok/s per GPU", "÷ fleet [interval]", "verdict", "ITL p50",
                           "J / good token", "cost / M good", "what sets it apart"):
                table.add_column(column, overflow="fold")
            for p in g.places:
                decision = p.decisions.get("output_tokens_per_s")
                ratio = f"{p.relative['output_tokens_per_s']:.3f}" if "output_tokens_per_s" in p.relative else "–"
                if decision is not None and decision.ci_low is not None:
                    ratio += f" [{decision.ci_low:.3f}, {decision.ci_high:.3f}]"
                verdict = "OUTLIER" if p.outlier else decision.verdict if decision is not None else "–"
                table.add_row(Text(p.node), str(p.runs),
                              value("output_tokens_per_s", p.values.get("output_tokens_per_s")), ratio, verdict,
                              value("itl_s.p50", p.values.get("itl_s.p50")),
                              value("energy_per_token_j", p.energy_per_good_token_j),
                              money(p.cost_per_million_good_tokens, report.currency),
                              Text("; ".join([*p.reasons, *(s.says() for s in p.stack), *p.state]) or "–"),
                              style="bold red" if p.outlier else None)
            console.print(table)
        for change in report.changes:
            console.print(Text(f"{change.at:%Y-%m-%d %H:%M} {change.scope}: {change.explanation}"))
    flagged = any(g.outliers for g in report.groups)
    return EXIT_FAILED if args.fail_on_outlier and flagged else EXIT_OK
