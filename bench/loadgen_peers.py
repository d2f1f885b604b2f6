"""benchd's openai engine side by side with guidellm and AIPerf against a C mock with known timing, every tool's
figures read from its own output files and compared with the mock's own stamps (bench/mock_openai.c).

    python bench/loadgen_peers.py                    # the 2-core comparison: mock on core 0, each client on core 1
    python bench/loadgen_peers.py --tools benchd --rates 400,800 --seconds 10
    python bench/loadgen_peers.py --processes 1,2,4,8  # benchd alone, 1…8 client processes (a 16-core host)

Cases: `short` (TTFT 20 ms, ITL 5 ms, 64 prompt / 16 output tokens, at each --rates) and `long` (10 requests/s, 1,024
output tokens, 2 ms ITL, no token counts from the server but the final usage). A rate is clean when no request
failed, the mock saw at least 90 % of the target rate and TTFT p99 is within 5 ms of the mock's own. guidellm and
AIPerf are installed from PyPI into virtual environments of their own under --peers (once). Needs a C compiler,
taskset, and benchd's dependencies (the wheels of bench/wheelhouse.sh on a host without network)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from loadgen_mock import Mock, Truth, build_mock, make_tokenizer, wait_idle
from loadgen_tools import TOOLS, Case, Figures

CASES = {
    "short": Case("short", ttft_ms=20, itl_ms=5, prompt_tokens=64, output_tokens=16),
    "long": Case("long", ttft_ms=20, itl_ms=2, prompt_tokens=64, output_tokens=1024, rates=(10.0,)),
}


@dataclass
class Row:
    tool: str
    case: str
    rate: float
    figures: Figures | None
    truth: Truth
    load: float  # the 1-minute load average before the run
    cpu_s: float = 0.0  # the tool's CPU time, every process of it, start-up included
    note: str = ""

    @property
    def clean(self) -> bool:
        f, truth_p99 = self.figures, self.truth.pct("ttft_s", 99)
        return (f is not None and f.errors == 0 and f.requests > 0 and self.truth.received_rps >= 0.9 * self.rate
                and f.ttft_p99_s is not None and truth_p99 is not None and f.ttft_p99_s - truth_p99 <= 0.005)


def ms(x: float | None, signed: bool = False) -> str:
    return "–" if x is None else f"{x * 1e3:+.2f}" if signed else f"{x * 1e3:.2f}"


def error(figure: float | None, truth: float | None) -> float | None:
    return None if figure is None or truth is None else figure - truth


def print_rows(rows: list[Row]) -> None:
    """ITL two ways, each against the mock's own figure of the same kind: every gap (benchd, AIPerf's inter-chunk
    latency) and each request's mean gap (benchd's TPOT, guidellm's ITL, AIPerf's inter-token latency)."""
    print("\n| tool | case | rate | at the server | errors | lag p99 ms | TTFT p50 / p99 ms | truth p50 / p99 | "
          "TTFT error p50 / p99 | ITL p99 ms, every gap / truth / error | ITL p99 ms, request means / truth / error | "
          "clean | CPU s | load |")
    print("| --- " * 14 + "|")
    for r in rows:
        f, t = r.figures, r.truth
        if f is None:
            print(f"| {r.tool} | {r.case} | {r.rate:g} | failed: {r.note} |" + " |" * 10)
            continue
        gap, mean = t.pct("itl_s", 99), t.pct("itl_request_s", 99)
        print(f"| {r.tool} | {r.case} | {r.rate:g} | {r.truth.received_rps:.1f} | {f.errors} | {ms(f.lag_p99_s)} | "
              f"{ms(f.ttft_p50_s)} / {ms(f.ttft_p99_s)} | {ms(t.pct('ttft_s', 50))} / {ms(t.pct('ttft_s', 99))} | "
              f"{ms(error(f.ttft_p50_s, t.pct('ttft_s', 50)), True)} / "
              f"{ms(error(f.ttft_p99_s, t.pct('ttft_s', 99)), True)} | "
              f"{ms(f.itl_p99_s)} / {ms(gap)} / {ms(error(f.itl_p99_s, gap), True)} | "
              f"{ms(f.mean_itl_p99_s)} / {ms(mean)} / {ms(error(f.mean_itl_p99_s, mean), True)} | "
              f"{'yes' if r.clean else 'no'} | {r.cpu_s:.1f} | {r.load:.2f} |", flush=True)


def run_one(tool, case: Case, rate: float, mock: Mock, args, work: Path, processes: int = 1,
            dataset: str | None = None) -> Row:
    load = wait_idle()
    out = work / f"{tool.name}-{case.name}-{rate:g}-{processes}"
    out.mkdir(parents=True, exist_ok=True)
    started, cpu = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        figures = tool.run(case, rate, args.seconds, mock.base_url, args.tokenizer, out, args.client_cores,
                           processes, dataset)
        note = ""
    except (subprocess.SubprocessError, OSError, ValueError, KeyError) as failure:
        figures, note = None, f"{type(failure).__name__}: {str(failure)[-300:]}"
    truth = mock.stamps(started, time.monotonic())
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = used.ru_utime + used.ru_stime - cpu.ru_utime - cpu.ru_stime
    return Row(tool.label(processes), case.name, rate, figures, truth, load, cpu_s, note)


def compare(args, binary: Path, work: Path) -> list[Row]:
    rows: list[Row] = []
    for case_name in args.cases:
        case = CASES[case_name]
        mock = Mock(binary, work / case.name, case.ttft_ms, case.itl_ms, case.prompt_tokens, args.mock_cores)
        try:
            tools = [TOOLS[name](args.peers) for name in args.tools]
            for rate in case.rates or args.rates:
                for tool in tools:  # the tools take turns at each rate: a shared machine's noise hits them alike
                    rows.append(row := run_one(tool, case, rate, mock, args, work))
                    print_rows([row])
        finally:
            mock.stop()
    return rows


def scale(args, binary: Path, work: Path) -> list[Row]:
    """benchd with 1, 2, 4 … client processes, each on a core of its own (plus one for the dispatching process),
    the mock on --mock-cores with a thread a core; rates climb until two in a row are not clean. Prompts come from a file
    made ahead (as the peers make theirs), so what scales is the clients, not prompt synthesis in one process."""
    case, tool, rows = CASES["short"], TOOLS["benchd"](args.peers), []
    dataset = make_prompts(Path(args.tokenizer), case.prompt_tokens, work / "scale" / "prompts.jsonl")
    mock_threads = len(cores(args.mock_cores))
    mock = Mock(binary, work / "scale", case.ttft_ms, case.itl_ms, case.prompt_tokens, args.mock_cores, mock_threads)
    first = max(cores(args.mock_cores)) + 1
    try:
        for n in args.processes:
            args.client_cores = f"{first}-{min(first + n, os.cpu_count() - 1)}"
            unclean = 0
            for step in args.scale_rates:
                rows.append(row := run_one(tool, case, step * n, mock, args, work, processes=n, dataset=dataset))
                print_rows([row])
                unclean = 0 if row.clean else unclean + 1
                if unclean == 2:  # two in a row: past the limit, not one unlucky run
                    break
    finally:
        mock.stop()
    print("\n| client processes | client cores | highest clean rate | lag p99 ms | TTFT error p99 ms | "
          "ITL error p99 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in args.processes:
        clean = [r for r in rows if r.tool == tool.label(n) and r.clean]
        best = max(clean, key=lambda r: r.rate) if clean else None
        if best is None:
            print(f"| {n} | {n + 1} | none | | | |")
            continue
        f, t = best.figures, best.truth
        print(f"| {n} | {n + 1} | {best.rate:g} | {ms(f.lag_p99_s)} | "
              f"{ms(error(f.ttft_p99_s, t.pct('ttft_s', 99)), True)} | {ms(error(f.itl_p99_s, t.pct('itl_s', 99)), True)} |")
    return rows


def make_prompts(tokenizer_dir: Path, tokens: int, path: Path, count: int = 2000) -> str:
    """count prompts of exactly `tokens` tokens, one JSON object a line."""
    import random

    sys.path.insert(0, str(ROOT / "src"))
    from benchd.loadgen.contents import clean_ids, sized_text
    from benchd.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(str(tokenizer_dir))
    allowed, rng = clean_ids(tokenizer), random.Random(0)
    path.write_text("".join(json.dumps({"prompt": sized_text(tokenizer, rng, allowed, tokens)[0]}) + "\n"
                            for _ in range(count)))
    return str(path)


def cores(spec: str) -> list[int]:
    out: list[int] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def summary(rows: list[Row]) -> None:
    print("\nhighest clean rate per tool (short case):")
    best: dict[str, float] = {}
    for r in rows:
        if r.case == "short" and r.clean:
            best[r.tool] = max(best.get(r.tool, 0.0), r.rate)
    for tool in dict.fromkeys(r.tool for r in rows):
        print(f"  {tool}: {best.get(tool, 'none')}")
    peers = [v for k, v in best.items() if not k.startswith("benchd")]
    if "benchd" in best and peers:
        print(f"  benchd / best peer: {best['benchd'] / max(peers):.1f}x")
    print("errors |figure − the mock's own| where a peer's is smaller than benchd's (TTFT p50, p99; ITL p99 of the "
          "same kind):")
    worse = 0
    for key in dict.fromkeys((r.case, r.rate) for r in rows):
        at = [r for r in rows if (r.case, r.rate) == key and r.figures is not None]
        ours = next((r for r in at if r.tool == "benchd"), None)
        for peer in (r for r in at if ours is not None and r.tool != "benchd"):
            for name, truth in (("ttft_p50_s", ("ttft_s", 50)), ("ttft_p99_s", ("ttft_s", 99)),
                                ("itl_p99_s", ("itl_s", 99)), ("mean_itl_p99_s", ("itl_request_s", 99))):
                mine, theirs = (error(getattr(r.figures, name), r.truth.pct(*truth)) for r in (ours, peer))
                if mine is not None and theirs is not None and abs(theirs) < abs(mine):
                    worse += 1
                    print(f"  {key[0]} {key[1]:g}/s {name}: {peer.tool} {theirs * 1e3:+.2f} ms, "
                          f"benchd {mine * 1e3:+.2f} ms")
    if not worse:
        print("  none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tools", default="benchd,guidellm,aiperf", type=lambda s: s.split(","))
    parser.add_argument("--cases", default="short,long", type=lambda s: s.split(","))
    parser.add_argument("--rates", default="100,200,400,800", type=lambda s: [float(x) for x in s.split(",")])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mock-cores", default="0")
    parser.add_argument("--client-cores", default="1")
    parser.add_argument("--processes", type=lambda s: [int(x) for x in s.split(",")],
                        help="scaling mode: benchd alone with this many client processes each")
    parser.add_argument("--scale-rates", default="400,600,800,1000,1200",
                        type=lambda s: [float(x) for x in s.split(",")],
                        help="scaling mode: rates per client process, climbed until two in a row are not clean")
    parser.add_argument("--out", default=str(ROOT / "runs" / "loadgen"))
    parser.add_argument("--peers", help="where guidellm's and AIPerf's virtual environments are (default: OUT/peers)")
    args = parser.parse_args()
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    for case in CASES.values():
        (work / case.name).mkdir(exist_ok=True)
    (work / "scale").mkdir(exist_ok=True)
    args.peers = Path(args.peers).resolve() if args.peers else work / "peers"
    args.tokenizer = str(make_tokenizer(work / "tokenizer"))
    binary = build_mock(work)
    print(f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}; mock on cores {args.mock_cores}; "
          f"{time.strftime('%Y-%m-%d')}", flush=True)
    if args.processes:
        scale(args, binary, work)
    else:
        rows = compare(args, binary, work)
        print_rows(rows)
        summary(rows)


if __name__ == "__main__":
    main()
