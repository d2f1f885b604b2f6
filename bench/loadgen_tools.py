"""The load generators compared by bench/loadgen_peers.py: how each is run, and its figures read from its own files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    ttft_ms: float
    itl_ms: float
    prompt_tokens: int
    output_tokens: int
    rates: tuple[float, ...] = ()  # fixed rates; empty: the command line's


@dataclass
class Figures:
    """What a tool reported, in seconds and requests/s."""

    requests: int
    errors: int
    achieved_rps: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None  # every gap between tokens (None: the tool does not report it)
    itl_p99_s: float | None
    lag_p99_s: float | None = None  # dispatch lag, where the tool reports it
    mean_itl_p50_s: float | None = None  # each request's mean gap, (last token − first) / (tokens − 1)
    mean_itl_p99_s: float | None = None


def pinned(cores: str | None, command: list[str]) -> list[str]:
    return ["taskset", "-c", cores, *command] if cores else command


def run_logged(command: list[str], out: Path, timeout_s: float, env: dict | None = None) -> None:
    with (out / "stdout.txt").open("w") as stdout:
        done = subprocess.run(command, stdout=stdout, stderr=subprocess.STDOUT, timeout=timeout_s, env=env,
                              cwd=out, check=False)
    if done.returncode:
        tail = (out / "stdout.txt").read_text()[-1500:]
        raise subprocess.SubprocessError(f"{command[0:3]} exited {done.returncode}: {tail}")


class Benchd:
    name = "benchd"

    def __init__(self, peers: Path) -> None:
        pass

    def label(self, processes: int) -> str:
        return "benchd" if processes == 1 else f"benchd ×{processes}"

    def run(self, case: Case, rate: float, seconds: float, base_url: str, tokenizer: str, out: Path,
            cores: str | None, processes: int, dataset: str | None = None) -> Figures:
        spec = {"name": f"loadgen-{case.name}", "engine": "openai", "model": "mock",
                "openai": {"base_url": base_url, "tokenizer": tokenizer, "stream_options": {"include_usage": True}},
                "workload": {"arrivals": {"profile": "constant", "rate": rate}, "stop": {"duration_s": seconds},
                             "prompt_tokens": {"dist": "fixed", "value": case.prompt_tokens},
                             "output_tokens": {"dist": "fixed", "value": case.output_tokens}}}
        if processes > 1:
            spec["openai"]["client_processes"] = processes
        if dataset is not None:  # prompts made ahead: the dispatching process does no tokenizer work per request
            del spec["workload"]["prompt_tokens"]
            spec["workload"]["dataset"] = {"format": "jsonl", "path": dataset}
        (out / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"),
                                                                         os.environ.get("PYTHONPATH")]))}
        run_logged(pinned(cores, [sys.executable, "-m", "benchd.cli", "run", "spec.json", "--out", "result"]),
                   out, seconds * 3 + 120, env)
        s = json.loads((out / "result" / "summary.json").read_text())["stages"][0]
        return Figures(s["requests"], s["errors"], s["requests_per_s"], s["ttft_s"]["p50"], s["ttft_s"]["p99"],
                       s["itl_s"]["p50"], s["itl_s"]["p99"], s["dispatch_lag_s"]["p99"],
                       s["tpot_s"]["p50"], s["tpot_s"]["p99"])  # benchd's TPOT: each request's mean gap


class Peer:
    """A tool from PyPI in a virtual environment of its own, made on first use."""

    name = package = ""

    def __init__(self, peers: Path) -> None:
        self.env = peers / self.name
        if not (self.env / ".installed").exists():
            print(f"installing {self.package} into {self.env} …", flush=True)
            venv.create(self.env, with_pip=True, clear=True)
            subprocess.run([str(self.env / "bin" / "pip"), "install", "-q", self.package], check=True)
            (self.env / ".installed").touch()

    def label(self, processes: int) -> str:
        return self.name

    def tool_env(self) -> dict:
        # No HF_HUB_OFFLINE: AIPerf 0.13 then looks a local tokenizer directory up as a hub snapshot and fails.
        return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


class Guidellm(Peer):
    name, package = "guidellm", "guidellm==0.8.1"

    def run(self, case: Case, rate: float, seconds: float, base_url: str, tokenizer: str, out: Path,
            cores: str | None, processes: int, dataset: str | None = None) -> Figures:
        command = [str(self.env / "bin" / "guidellm"), "run",
                   "--backend", (f"kind=openai_http,target={base_url.removesuffix('/v1')},model=mock,"
                                 "request_format=/v1/completions"),
                   "--profile", f"kind=constant,rate={rate:g}",
                   "--constraint", f"kind=max_duration,seconds={seconds:g}",
                   "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
                   "--data", (f"kind=synthetic_text,prompt_tokens={case.prompt_tokens},"
                              f"output_tokens={case.output_tokens}"),
                   "--output", f"kind=json,path={out / 'benchmarks.json'}", "--disable-console-interactive"]
        run_logged(pinned(cores, command), out, seconds * 4 + 300, self.tool_env())
        report = json.loads((out / "benchmarks.json").read_text())
        metrics = report["benchmarks"][0]["metrics"]

        def pct(name: str, q: str) -> float | None:
            value = metrics[name]["successful"]["percentiles"][q]
            return None if value is None else value / 1e3  # ms

        totals = metrics["request_totals"]  # "incomplete": cut off by the time limit, not failed
        delay = metrics["request_dispatch_delay"]["successful"]["percentiles"]["p99"]  # seconds
        # guidellm's ITL is each request's mean gap, (latency − TTFT) / (output tokens − 1); no gap by gap
        return Figures(totals["successful"], totals["errored"], metrics["requests_per_second"]["successful"]["mean"],
                       pct("time_to_first_token_ms", "p50"), pct("time_to_first_token_ms", "p99"), None, None, delay,
                       pct("inter_token_latency_ms", "p50"), pct("inter_token_latency_ms", "p99"))


class Aiperf(Peer):
    name, package = "aiperf", "aiperf==0.13.0"

    def run(self, case: Case, rate: float, seconds: float, base_url: str, tokenizer: str, out: Path,
            cores: str | None, processes: int, dataset: str | None = None) -> Figures:
        command = [str(self.env / "bin" / "aiperf"), "profile", "--model", "mock", "--url",
                   base_url.removesuffix("/v1"), "--endpoint-type", "completions", "--streaming",
                   "--request-rate", f"{rate:g}", "--arrival-pattern", "constant",
                   "--benchmark-duration", f"{seconds:g}", "--isl", str(case.prompt_tokens), "--isl-stddev", "0",
                   "--osl", str(case.output_tokens), "--osl-stddev", "0",
                   "--tokenizer", tokenizer, "--artifact-dir", str(out / "artifacts"), "--ui-type", "none"]
        run_logged(pinned(cores, command), out, seconds * 4 + 300, self.tool_env())
        report = json.loads((out / "artifacts" / "profile_export_aiperf.json").read_text())

        def pct(name: str, q: str) -> float | None:
            metric = report.get(name)
            return None if metric is None or metric.get(q) is None else metric[q] / 1e3  # ms

        errors = sum(e.get("count", 1) for e in report.get("error_summary") or [])
        # inter_chunk_latency: every gap between chunks; inter_token_latency: each request's mean gap
        return Figures(int(report["request_count"]["avg"]), errors, report["request_throughput"]["avg"],
                       pct("time_to_first_token", "p50"), pct("time_to_first_token", "p99"),
                       pct("inter_chunk_latency", "p50"), pct("inter_chunk_latency", "p99"), None,
                       pct("inter_token_latency", "p50"), pct("inter_token_latency", "p99"))


TOOLS = {"benchd": Benchd, "guidellm": Guidellm, "aiperf": Aiperf}
