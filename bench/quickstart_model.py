"""Should the quick start's embedded model be the real preset? Side by side in one invocation, on this machine:
`benchd serve` from its start to /readyz (its worker up and its model loaded) with BENCHD_MODEL=tiny and with
smollm2-135m (converted already: a later start; --cold converts it again first, into a fresh XDG_CACHE_HOME), then
the daemon's default schedule's workload (daemon/schedules.py) run on each model as the daemon would run it, and
the worker's resident memory after it.
   python bench/quickstart_model.py [--rounds 2] [--cold]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

MODELS = ("tiny", "smollm2-135m")


def start(model: str, port: int, where: Path, env: dict) -> tuple[float, float, int]:
    """(seconds to /readyz, seconds for one default-schedule run, the worker's RSS bytes after it)."""
    env = {**os.environ, **env, "BENCHD_DATABASE_URL": f"sqlite:///{where}/benchd.db", "BENCHD_PORT": str(port),
           "BENCHD_DEVICE": "cpu", "BENCHD_MODEL": model, "BENCHD_DEFAULT_SCHEDULE": "false",
           "BENCHD_SPOOL_DIR": str(where / "spool"), "BENCHD_WORKERS__LOG_DIR": str(where / "workers")}
    begun = time.perf_counter()
    process = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=open(where / "serve.log", "a"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.perf_counter() - begun > 900:
                raise RuntimeError(f"the daemon did not become ready: {(where / 'serve.log').read_text()[-2000:]}")
            time.sleep(0.1)
        ready_s = time.perf_counter() - begun
        from benchd.daemon.schedules import DEFAULT_SCHEDULE_SPEC

        run_begun = time.perf_counter()
        run_id = httpx.post(f"{url}/runs", json=DEFAULT_SCHEDULE_SPEC, timeout=30).json()["id"]
        while (run := httpx.get(f"{url}/runs/{run_id}", timeout=30).json())["status"] in ("queued", "running"):
            time.sleep(0.2)
        run_s = time.perf_counter() - run_begun
        workers = psutil.Process(process.pid).children(recursive=True)
        rss = max((w.memory_info().rss for w in workers), default=0)
        summary = (run.get("summary") or [{}])[0]
        quality = run.get("quality") or {}
        print(f"  {model}: ready {ready_s:.1f} s; default schedule's run {run_s:.1f} s, {run['status']}, "
              f"{'valid' if run.get('valid') else 'INVALID ' + str([i['check'] for i in summary.get('invalid', [])])}"
              f", {summary.get('output_tokens_per_s', 0):.1f} output tok/s, prompts {quality.get('prompts')}, "
              f"probe {quality.get('probe_s') or 0:.1f} s; worker RSS {rss / 2**20:.0f} MiB", flush=True)
        return ready_s, run_s, rss
    finally:
        process.terminate()
        process.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="the first start of the real preset: it converts")
    args = parser.parse_args()
    port = 18800
    results: dict[str, list[tuple[float, float, int]]] = {m: [] for m in MODELS}
    with tempfile.TemporaryDirectory() as tmp:
        if args.cold:
            where = Path(tmp) / "cold"
            where.mkdir()
            print("first start (converts into a fresh cache):", flush=True)
            start("smollm2-135m", port, where, {"XDG_CACHE_HOME": str(Path(tmp) / "cache")})
        for r in range(args.rounds):
            print(f"round {r + 1}:", flush=True)
            for model in MODELS:  # interleaved: the shared machine's load falls on both alike
                port += 1
                where = Path(tmp) / f"{model}-{r}"
                where.mkdir()
                results[model].append(start(model, port, where, {}))
    for model, got in results.items():
        print(f"{model}: ready median {statistics.median(g[0] for g in got):.1f} s, default run median "
              f"{statistics.median(g[1] for g in got):.1f} s, worker RSS {max(g[2] for g in got) / 2**20:.0f} MiB")


if __name__ == "__main__":
    main()
