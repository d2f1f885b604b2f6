"""benchd's own cost on the GPU: the reference workload through a live benchd daemon (its engine in a worker
process; Prometheus histograms and exemplars, spans to a local OTLP receiver in its own process, the hardware
sampler at 1 s, and /metrics scraped every second as Prometheus would, each scrape timed) against bare
`generate_batch` in this process with the same continuous-batching configuration, alternating (each round in the
reverse order of the one before), with the pairs' throughput ratios and a bootstrap interval. The `local` mode
runs benchd's worker core in this process instead (the runner and engine without the process split), with an
account of where the generation thread's time went (see bench/accounting.py). `local-warm` keeps one core and its
engine warm across runs, as a daemon's worker does, and is paired with `local` (a new engine each run): a daemon's
timed run is always its warm engine's second, so this separates a warm engine from the process split.

    python bench/gpu_overhead.py [--repeats 8] [--modes bare daemon local bare@16 daemon@16 …]
    python bench/gpu_overhead.py --smoke      # the tiny model on the CPU: checks the script

Bare generate_batch is timed from its own per-token timestamps (record_timestamps): throughput over
first request created → last token, TTFT = first token − the first request created (all are scheduled at
once, as benchd schedules them), ITL = consecutive token gaps.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from accounting import Accounting, frozen
from common import REFERENCE, ROOT, environment
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from prometheus_client import CollectorRegistry

import httpx

from benchd.engines.transformers.batching import cb_config, cpu_threads
from benchd.hardware.reader import HardwareReader
from benchd.telemetry.metrics import Metrics
from benchd.models.loading import greedy_config, load_model
from benchd.measure.summary import StageSummary
from benchd.hardware.sampler import HardwareSampler, HardwareSummary
from benchd.spec import parse_spec
from benchd.telemetry.run import Telemetry
from benchd.telemetry.tracing import build_tracer_provider
from benchd.daemon.inprocess import LocalPool, run_local
from benchd.loadgen.contents import contents

LATENCIES = ("ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p90_ms", "itl_p99_ms")


def bare(loaded, spec, **config) -> dict:
    """transformers' generate_batch, nothing of benchd around it but the prompts and the configuration (benchd's
    continuous-batching defaults and its CPU threads for the engine)."""
    threads = cpu_threads(spec.transformers, loaded.device.type)
    before = torch.get_num_threads()
    torch.set_num_threads(threads or before)
    try:
        return _bare(loaded, spec, **config)
    finally:
        torch.set_num_threads(before)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # its cache and graph pool back to the GPU, for the daemon's worker


def _bare(loaded, spec, **config) -> dict:
    stream = contents(spec.workload, spec.seed, loaded.vocab_size, loaded.special_ids)
    prompts = [next(stream).prompt_ids for _ in range(spec.workload.stop.requests)]
    out_len = spec.workload.output_tokens.value
    results = loaded.model.generate_batch(
        prompts, generation_config=greedy_config(loaded, True, out_len),
        continuous_batching_config=cb_config(spec.transformers.model_copy(update=config), loaded.device.type), record_timestamps=True,
        max_new_tokens=out_len,
    )
    outputs = list(results.values())
    start = min(o.created_time for o in outputs)
    end = max(o.timestamps[-1] for o in outputs)
    tokens = sum(len(o.generated_tokens) for o in outputs)
    # All requests are scheduled at once, as benchd schedules them: TTFT counts from the batch's start (the first
    # request's creation), like benchd's from the scheduled time; from each request's own creation it would
    # leave out the time generate_batch takes to add the requests before it.
    ttft = [o.timestamps[0] - start for o in outputs]
    itl = [b - a for o in outputs for a, b in zip(o.timestamps, o.timestamps[1:])]
    return {"output_tok_s": tokens / (end - start), "tokens": tokens,
            **{f"ttft_p{p}_ms": float(np.percentile(ttft, p)) * 1e3 for p in (50, 90, 99)},
            **{f"itl_p{p}_ms": float(np.percentile(itl, p)) * 1e3 for p in (50, 90, 99)}}


def row_of(summary, hardware=None, engine_settings: dict | None = None) -> dict:
    s, resolved = summary, (engine_settings or {}).get("continuous_batching", {})
    return {**{k: resolved[k] for k in ("max_batch_tokens", "num_blocks") if k in resolved},
            "output_tok_s": s.output_tokens_per_s, "tokens": s.output_tokens,
            "ttft_p50_ms": s.ttft_s.p50 * 1e3, "ttft_p90_ms": s.ttft_s.p90 * 1e3, "ttft_p99_ms": s.ttft_s.p99 * 1e3,
            "itl_p50_ms": s.itl_s.p50 * 1e3, "itl_p90_ms": s.itl_s.p90 * 1e3, "itl_p99_ms": s.itl_s.p99 * 1e3,
            "dispatch_lag_p50_ms": s.dispatch_lag_s.p50 * 1e3, "dispatch_lag_max_ms": s.dispatch_lag_s.max * 1e3,
            "energy_per_token_mj": (hardware.energy_per_output_token_joules or 0) * 1e3 if hardware else None}


def local(loaded, spec, telemetry, hardware, pool: LocalPool | None = None) -> dict:
    """benchd's worker core and lifecycle in this process (no process split, no HTTP): a core of its own for the
    run, or the pool's, whose engine stays warm from one run to the next as in a daemon's worker."""
    sampler = HardwareSampler(hardware, interval_s=1.0) if hardware is not None else None
    if sampler is not None:
        sampler.start()
    try:
        outcome = run_local(spec, loaded=loaded, telemetry=telemetry, hardware=sampler, pool=pool)
    finally:
        if sampler is not None:
            sampler.stop()
    return row_of(outcome.summaries()[0], outcome.hardware,
                  outcome.metadata.engine_settings if outcome.metadata is not None else None)


SCRAPER = """
import subprocess, sys, time
url, path, client, offset = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
accept = "application/openmetrics-text; version=1.0.0"
if client == "httpx":
    import httpx
    http = httpx.Client(base_url=url, timeout=10)

    def scrape():
        start = time.perf_counter()
        http.get("/metrics", headers={"Accept": accept})
        return start, time.perf_counter() - start
else:  # curl times itself: no Python client in the figure
    def scrape():
        start = time.perf_counter()
        done = subprocess.run(["curl", "-s", "-o", "/dev/null", "-H", f"Accept: {accept}", "-w", "%{time_total}",
                               url + "/metrics"], capture_output=True, text=True)
        return start, float(done.stdout)
with open(path, "a", buffering=1) as out:
    next_at = time.perf_counter() + offset
    while True:
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.perf_counter()))
        out.write("%r %r\\n" % scrape())
"""


class Daemon:
    """`benchd serve` in its own process, its worker warmed with the spec's model; scraped every second with the
    OpenMetrics Accept header, as Prometheus does, each scrape's latency kept with its time."""

    def __init__(self, spec, otlp_endpoint: str, work: str, port: int = 18765, curl_scraper: bool = False) -> None:
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "BENCHD_PORT": str(port), "BENCHD_MODEL": spec.model, "BENCHD_DTYPE": spec.dtype,
               "BENCHD_DEVICE": spec.device, "BENCHD_DEFAULT_SCHEDULE": "false",
               "BENCHD_DATABASE_URL": f"sqlite:///{work}/benchd.db", "BENCHD_SPOOL_DIR": f"{work}/spool",
               "BENCHD_WORKERS__LOG_DIR": f"{work}/workers", "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
               "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
        self.log = open(f"{work}/daemon.log", "w")
        self.process = subprocess.Popen([sys.executable, "-m", "benchd.cli", "serve"], env=env, cwd=ROOT,
                                        stdout=self.log, stderr=self.log)
        self.http = httpx.Client(base_url=self.url, timeout=60)
        self.work = work
        self.scrapers: dict[str, subprocess.Popen] = {}
        deadline = time.monotonic() + 900
        while True:
            try:
                if (ready := self.http.get("/readyz")).status_code == 200:
                    worker = ready.json()["workers"][0]
                    self.priority = {"worker_nice": worker["nice"],
                                     "worker_dispatch_priority": worker["dispatch_priority"]}
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"the daemon did not get ready: see {work}/daemon.log")
            time.sleep(0.5)
        # The scraper is a process of its own, as Prometheus is: in this one, the thread polling the run's status
        # (and decoding its summary) shared the GIL with it and showed as scrape latency. perf_counter() stamps are
        # CLOCK_MONOTONIC, comparable across processes.
        # With curl too (--curl-scraper), a second scraper half a second after the first: its figure has no
        # Python client in it.
        for client, offset in (("httpx", 0.0), ("curl", 0.5))[:2 if curl_scraper else 1]:
            self.scrapers[client] = subprocess.Popen([sys.executable, "-c", SCRAPER, self.url,
                                                      f"{work}/scrapes-{client}.txt", client, str(offset)])

    def scrapes(self, client: str) -> list[tuple[float, float]]:
        """(when, seconds) of every scrape so far."""
        try:
            with open(f"{self.work}/scrapes-{client}.txt") as f:
                return [(float(a), float(b)) for a, b in (line.split() for line in f if line.count(" ") == 1)]
        except FileNotFoundError:
            return []

    def run(self, spec) -> dict:
        started = time.perf_counter()
        run_id = self.http.post("/runs", json=spec.model_dump(mode="json")).json()["id"]
        while (run := self.http.get(f"/runs/{run_id}").json())["status"] in ("queued", "running"):
            time.sleep(0.25)
        if run["status"] != "succeeded":
            raise SystemExit(f"the daemon's run {run['status']}: {run['error']}")
        ended = time.perf_counter()
        row = row_of(StageSummary.model_validate(run["summary"][0]),
                     HardwareSummary.model_validate(run["hardware"]) if run["hardware"] else None,
                     (run["metadata"] or {}).get("engine_settings"))
        row.update(self.priority)
        for client in self.scrapers:
            key = "metrics" if client == "httpx" else f"metrics_{client}"
            timed = [(t - started, seconds) for t, seconds in self.scrapes(client) if started <= t <= ended]
            during = sorted(seconds for _, seconds in timed)
            if during:
                row.update({f"{key}_p50_ms": float(np.percentile(during, 50)) * 1e3,
                            f"{key}_p99_ms": float(np.percentile(during, 99)) * 1e3,
                            f"{key}_max_ms": during[-1] * 1e3, f"{key}_scrapes": len(during),
                            # the three slowest: when in the run (s from its request) and how long (ms)
                            f"{key}_slowest": [(round(t, 2), round(seconds * 1e3, 2))
                                               for t, seconds in sorted(timed, key=lambda x: -x[1])[:3]]})
        row["run_s"] = ended - started
        return row

    def close(self) -> None:
        for scraper in self.scrapers.values():
            scraper.kill()
            scraper.wait()
        self.process.terminate()
        self.process.wait(120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", nargs="*", default=["bare", "daemon"],
                        help="bare, bare-fresh (bare in a process of its own for each run, the model loaded "
                             "and warmed there, as the daemon's worker is for each daemon run), "
                             "bare-mrpb1024 (max_requests_per_batch 1,024, as benchd resolved it), "
                             "bare-frozen (gc.freeze() before the run), daemon (through a live daemon, everything "
                             "on), local (benchd's worker core in this process, everything on, a new engine each "
                             "run), local-warm (the same, one core and engine kept warm across runs, as a daemon's "
                             "worker does), local-off (nothing exported, no sampler); any mode as MODE@N runs the "
                             "engine with torch at N intra-op threads (transformers.cpu_threads: bare@16, daemon@16), "
                             "and is paired with bare@N")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--smoke", action="store_true",
                        help="the tiny preset on the CPU, 16 requests of 32/32 tokens: checks the script, measures nothing")
    parser.add_argument("--curl-scraper", action="store_true",
                        help="a second scraper through curl, half a second after the first (metrics_curl_*)")
    parser.add_argument("--one-bare", metavar="SPEC_JSON", help=argparse.SUPPRESS)  # what bare-fresh starts
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.one_bare:
        one_spec = parse_spec(json.loads(args.one_bare))
        one_loaded = load_model(one_spec.model, one_spec.dtype, one_spec.device, seed=0)
        bare(one_loaded, one_spec)  # untimed, as in this process: first-use costs (CUDA graphs, kernels)
        print(json.dumps(Accounting().measure(lambda: bare(one_loaded, one_spec))), flush=True)
        return
    # Each mode runs on what main() sets up below (loaded, telemetry, hardware, quiet): checked before that.
    modes = {
        "bare": lambda spec: bare(loaded, spec),
        "bare-mrpb1024": lambda spec: bare(loaded, spec, max_requests_per_batch=1024),
        "bare-frozen": lambda spec: frozen(lambda: bare(loaded, spec)),
        "bare-fresh": lambda spec: fresh_bare(spec),
        "daemon": lambda spec: daemon_run(spec),
        "local": lambda spec: local(loaded, spec, telemetry, hardware),
        "local-off": lambda spec: local(loaded, spec, quiet, None),
        "local-warm": lambda spec: local(loaded, spec, telemetry, hardware, warm_pool),
    }
    for mode in args.modes:
        try:
            name, threads = split_mode(mode)
        except ValueError:
            parser.error(f"--modes: {mode}: after @ comes a thread count, such as bare@8")
        if name not in modes:
            parser.error(f"--modes: unknown mode {name!r} (known: {', '.join(modes)})")
        if threads is not None and threads < 1:
            parser.error(f"--modes: {mode}: the thread count after @ must be at least 1")
    print(environment(), flush=True)
    print(f"torch intra-op threads: {torch.get_num_threads()} by default", flush=True)
    spec = parse_spec(REFERENCE if not args.smoke else {
        **REFERENCE, "model": "tiny", "dtype": "float32", "device": "cpu",
        "workload": {**REFERENCE["workload"], "arrivals": {"profile": "concurrent", "concurrency": 16},
                     "stop": {"requests": 16}, "prompt_tokens": {"dist": "fixed", "value": 32},
                     "output_tokens": {"dist": "fixed", "value": 32}}})
    if not args.smoke:
        # One KV cache size for both sides: left to itself, each engine sizes its cache to most of the GPU memory
        # free when it starts, and the daemon's worker keeps its engine warm between runs, so bare generate_batch
        # in this process found a cache a third the size after the first daemon run (770 batches instead of 265).
        # 1,024 blocks of 256 tokens: twice what 256 requests of 512 tokens need. max_batch_tokens too: given only
        # the cache size, transformers solves the batch size from the memory free at start, which another process
        # on the GPU changes (the daemon's worker beside a warm local engine resolved 13,544 and ran 1.4× faster
        # than the bench's own engines, 2026-11-24); 8,192 is what benchd's defaults resolve on an idle GPU.
        spec = with_options(spec, num_blocks=1024, max_batch_tokens=8192)
    in_process = {"bare", "bare-mrpb1024", "bare-frozen", "local", "local-off", "local-warm"}
    loaded = (load_model(spec.model, spec.dtype, spec.device, seed=0)
              if any(split_mode(mode)[0] in in_process for mode in args.modes) else None)
    receiver = subprocess.Popen([sys.executable, "-m", "tests.otlp"], cwd=ROOT, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    endpoint = receiver.stdout.readline().strip()
    dropped = []
    provider = build_tracer_provider(lambda reason, n: dropped.append(n),
                                     exporter=OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    telemetry = Telemetry(Metrics(CollectorRegistry()), provider)
    hardware = HardwareReader.default()
    quiet = Telemetry()  # benchd's runner and engine with nothing exported: the cost of the measuring itself
    daemons: list[Daemon] = []

    def daemon_run(run_spec) -> dict:
        """A daemon started for this run and stopped after it: its worker keeps its engine, and the KV cache and
        CUDA graph pool with it, warm between runs, and on one GPU the bare runs would find that memory taken.
        Bare runs give theirs back too (empty_cache after each). Like bare, one untimed run comes first."""
        daemons.append(Daemon(spec, endpoint, tempfile.mkdtemp(prefix="benchd-overhead-"), 18765 + len(daemons),
                              args.curl_scraper))
        try:
            # Untimed first, as bare's: the run's engine (its own KV-cache size) is new in the worker, and its first
            # run pays first-use costs (CUDA graphs for each batch shape) that a daemon's warm engine does not.
            daemons[-1].run(run_spec)
            return daemons[-1].run(run_spec)
        finally:
            daemons[-1].close()
    def fresh_bare(run_spec) -> dict:
        """Bare generate_batch in a new process: whatever a long-lived bench process accumulates across rounds
        (two invocations saw in-process bare slow down round after round while the daemon's runs, each in a new
        process, did not) is out of the comparison."""
        done = subprocess.run([sys.executable, __file__, "--one-bare", json.dumps(run_spec.model_dump(mode="json"))],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"bare-fresh failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
    rows = {mode: [] for mode in args.modes}
    accounting = Accounting()
    warm_pool = LocalPool(loaded) if any(split_mode(mode)[0] == "local-warm" for mode in args.modes) else None
    if warm_pool is not None:  # untimed: first-use costs of every path, and the pool's engine runs once, stays warm
        local(loaded, spec, quiet, None, warm_pool)
    elif loaded is not None:
        bare(loaded, spec)  # untimed: first-use costs of every path
    for round_ in range(args.repeats):
        # Each round runs the modes in the reverse order of the one before (ABBA): whatever drifts within the
        # process (clocks, memory, the machine's neighbours) does not favour the mode that always runs first.
        for mode in args.modes if round_ % 2 == 0 else args.modes[::-1]:
            name, threads = split_mode(mode)
            mode_spec = spec if threads is None else with_options(spec, cpu_threads=threads)
            rows[mode].append(accounting.measure(functools.partial(modes[name], mode_spec)))
            with open(os.path.join(args.out, "overhead-runs.json"), "w") as f:  # what is measured survives a kill
                json.dump(rows, f)
            row = rows[mode][-1]
            print(f"{mode}: {row['output_tok_s']:.1f} tok/s, ITL p50 {row['itl_p50_ms']:.2f} ms, "
                  f"steps {row.get('step_calls', 0):.0f}, GIL wait {row['schedule_gil_wait_s']:.3f} + "
                  f"{row['update_gil_wait_s']:.3f} s, schedule CPU {row.get('schedule_cpu_s', 0):.2f} s, "
                  f"first batch {row.get('first_batch_requests', 0):.0f} requests, "
                  f"KV read {row.get('kv_read_tokens', 0):.4g}, mask {row.get('mask_elements', 0):.4g}"
                  + (f", engine max_batch_tokens {row['max_batch_tokens']}" if "max_batch_tokens" in row else "")
                  + (f", dispatch lag max {row['dispatch_lag_max_ms']:.1f} ms" if "dispatch_lag_max_ms" in row else ""),
                  flush=True)
    if warm_pool is not None:
        warm_pool.stop()
    telemetry.shutdown()
    spans, metric_exports = receiver.communicate("", timeout=60)[0].split()  # tests/otlp.py's two counts
    median = {mode: {k: statistics.median(r.get(k) or 0.0 for r in runs) for k in set().union(*runs)
                     if not any(isinstance(r.get(k), list) for r in runs)}  # the slowest scrapes: raw only
              for mode, runs in rows.items()}
    with open(os.path.join(args.out, "overhead.json"), "w") as f:
        json.dump({"environment": environment(), "runs": rows, "median": median, "spans": spans,
                   "spans_dropped": sum(dropped), "metric_exports": metric_exports}, f, indent=2)
    print(f"\nspans received {spans}, dropped {sum(dropped)}; OTLP metric exports received {metric_exports}")
    rng = np.random.default_rng(0)
    for mode in args.modes:  # the same round's runs as pairs
        base = baseline(mode, args.modes)
        if base is None:
            continue
        ratios = np.array([r["output_tok_s"] / b["output_tok_s"] for r, b in zip(rows[mode], rows[base])])
        means = rng.choice(ratios, (10_000, len(ratios))).mean(axis=1)
        low, high = np.percentile(means, [2.5, 97.5])
        print(f"{mode} / {base} output tok/s by pair: {' '.join(f'{x:.3f}' for x in ratios)}; "
              f"mean {ratios.mean():.3f} (95 % bootstrap interval {low:.3f}–{high:.3f}), "
              f"median {np.median(ratios):.3f}, {mode} faster in {(ratios > 1).sum()} of {len(ratios)}")
        latency = {key: np.median([r[key] / b[key] for r, b in zip(rows[mode], rows[base])]) for key in LATENCIES}
        print("  latencies, median of the pairs' ratios: "
              + ", ".join(f"{key.removesuffix('_ms')} {ratio:.3f}" for key, ratio in latency.items()))
    print(f"\n{'figure (median of ' + str(args.repeats) + ')':28} "
          + " ".join(f"{mode:>14} {'/ base':>7}" for mode in args.modes))
    for key in ("output_tok_s", *LATENCIES, "metrics_p50_ms", "metrics_p99_ms", "metrics_max_ms",
                "metrics_curl_p50_ms", "metrics_curl_p99_ms", "metrics_curl_max_ms"):
        if not all(key in median[mode] for mode in args.modes if split_mode(mode)[0] == "daemon"):
            continue
        cells = []
        for mode in args.modes:
            base = baseline(mode, args.modes)
            value, reference = median[mode].get(key), median[base].get(key) if base else None
            ratio = f"{value / reference:7.3f}" if value is not None and reference else f"{'':7}"
            cells.append(f"{value if value is not None else float('nan'):14.2f} {ratio}")
        print(f"{key:28} " + " ".join(cells))
    print(f"\nwhere the time went (median of {args.repeats}; seconds unless named)")
    accounts = ("step_calls", "step_wall_s", "schedule_wall_s", "schedule_cpu_s", "schedule_gil_wait_s",
                "update_wall_s", "update_gil_wait_s", "generation_cpu_s", "consumer_cpu_s", "poll_calls", "poll_cpu_s",
                "sample_calls", "sample_cpu_s", "caller_cpu_s",
                "process_cpu_s", "first_batch_requests", "batches", "q_tokens", "kv_read_tokens", "mask_elements",
                "gc0_n", "gc0_s", "gc1_n", "gc1_s", "gc2_n", "gc2_s", "gc_in_generation_s")
    print(f"{'':28} " + " ".join(f"{mode:>14}" for mode in args.modes))
    for key in accounts:
        print(f"{key:28} " + " ".join(f"{median[m].get(key, 0.0):14.3f}" for m in args.modes))


def with_options(spec, **options):
    return spec.model_copy(update={"transformers": spec.transformers.model_copy(update=options)})


def split_mode(mode: str) -> tuple[str, int | None]:
    """'daemon@8' → ('daemon', 8): the mode, and torch's intra-op threads for its engine (None: benchd's default)."""
    name, _, threads = mode.partition("@")
    return name, int(threads) if threads else None


def baseline(mode: str, modes: list[str]) -> str | None:
    """What a mode is compared with: bare at the same thread count (bare@N against bare), else local for local-warm
    (a warm engine against a new one), else bare-fresh, else bare."""
    name, threads = split_mode(mode)
    bases = (f"bare@{threads}",) if threads is not None else ("local",) if name == "local-warm" else ()
    for base in (*bases, "bare-fresh", "bare") if name != "bare" else ("bare",):
        if base in modes and base != mode:
            return base
    return None


if __name__ == "__main__":
    main()
