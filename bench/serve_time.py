"""`make serve` on a fresh clone, as a new user runs it: seconds to the daemon's first answer (/healthz) and to ready
(/readyz: its worker's model loaded), for each git ref given, the refs interleaved round by round (this machine is
shared: side by side in one invocation). docs/getting-started.md states the figures.

    python3 bench/serve_time.py --refs 83e5245 HEAD --rounds 2 --no-cache
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT_S = 1800.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except OSError as error:
        return getattr(error, "code", None)


def one(ref: str, no_cache: bool) -> dict:
    """A fresh clone of ref, `make serve` in a session of its own, timed from its start; the session ended after."""
    where = Path(tempfile.mkdtemp(prefix="benchd-serve-time-"))
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(where / "repo")], check=True)
        subprocess.run(["git", "-C", str(where / "repo"), "checkout", "-q", ref], check=True)
        port = free_port()
        env = {**os.environ, "BENCHD_PORT": str(port), **({"PIP_NO_CACHE_DIR": "1"} if no_cache else {})}
        log = (where / "make.log").open("w")
        started = time.monotonic()
        make = subprocess.Popen(["make", "serve"], cwd=where / "repo", env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        first = ready = None
        try:
            while ready is None and make.poll() is None and time.monotonic() - started < LIMIT_S:
                time.sleep(1)
                if first is None and status(f"http://127.0.0.1:{port}/healthz") == 200:
                    first = time.monotonic() - started
                if first is not None and status(f"http://127.0.0.1:{port}/readyz") == 200:
                    ready = time.monotonic() - started
        finally:
            os.killpg(make.pid, signal.SIGTERM)
            make.wait(60)
            log.close()
        venv = where / "repo" / ".venv"
        packages = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
                                  capture_output=True, text=True).stdout.split()
        size = sum(f.stat().st_size for f in venv.rglob("*") if f.is_file() and not f.is_symlink())
        return {"ref": ref, "first_answer_s": first, "ready_s": ready, "packages": len(packages), "venv_bytes": size}
    finally:
        shutil.rmtree(where, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--refs", nargs="+", default=["HEAD"], help="git refs of this repository to time")
    parser.add_argument("--rounds", type=int, default=1, help="each ref this many times, interleaved")
    parser.add_argument("--no-cache", action="store_true", help="pip's cache off, as on a machine set up afresh")
    args = parser.parse_args()
    results = []
    for round_ in range(args.rounds):
        for ref in args.refs:
            found = one(ref, args.no_cache)
            results.append({**found, "round": round_})
            print(f"{ref} (round {round_ + 1}): first answer {found['first_answer_s'] or float('nan'):.0f} s, ready "
                  f"{found['ready_s'] or float('nan'):.0f} s; {found['packages']} packages, "
                  f"{found['venv_bytes'] / 2**30:.1f} GiB", flush=True)
    if out := os.environ.get("OUT"):
        Path(out, "serve_time.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
