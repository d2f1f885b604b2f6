"""Can benchd hold an open loop? A constant request rate against a fast local OpenAI-compatible server (the
tests' server, in its own process), measuring the dispatcher's lag: when each request left − when the schedule
said. Runs anywhere (no GPU):

    python bench/openai_open_loop.py [--rate 200] [--seconds 20] [--output-tokens 16] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from benchd.daemon.inprocess import run_local as run  # noqa: E402
from benchd.spec import parse_spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    server = subprocess.Popen([sys.executable, "-m", "tests.openai_server", "--delay", "0.002"], cwd=ROOT,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    base_url = server.stdout.readline().strip()
    prompts = ROOT / "runs" / "open-loop-prompts.jsonl"
    prompts.parent.mkdir(exist_ok=True)
    prompts.write_text("".join(f'{{"prompt": "prompt number {i}"}}\n' for i in range(100)))
    spec = parse_spec({
        "name": "open-loop", "engine": "openai", "model": "ok",
        "openai": {"base_url": base_url,
                   "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        "workload": {"arrivals": {"profile": "constant", "rate": args.rate},
                     "stop": {"duration_s": args.seconds}, "warmup": {"seconds": 1.0},
                     "dataset": {"format": "jsonl", "path": str(prompts)},
                     "output_tokens": {"dist": "fixed", "value": args.output_tokens}},
    })
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"server: tests/openai_server.py in its own process, 2 ms between chunks")
    print(f"{'run':>3} {'requests':>8} {'errors':>6} {'req/s':>8} {'lag p50 ms':>10} {'lag p99 ms':>10} "
          f"{'lag max ms':>10} {'TTFT p50 ms':>11}")
    try:
        for i in range(args.repeats):
            outcome = run(spec)
            s = outcome.summaries()[0]
            lag = s.dispatch_lag_s
            print(f"{i + 1:>3} {s.requests:>8} {s.errors:>6} {s.requests_per_s:8.1f} {lag.p50 * 1e3:10.3f} "
                  f"{lag.p99 * 1e3:10.3f} {lag.max * 1e3:10.3f} {s.ttft_s.p50 * 1e3:11.2f}", flush=True)
    finally:
        server.communicate("", timeout=30)


if __name__ == "__main__":
    main()
