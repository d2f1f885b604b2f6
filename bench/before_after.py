"""One bench script on two versions of benchd, side by side in one invocation: the script of this checkout runs
against an earlier commit's src/ and against this checkout's, alternating (ABBA… so that drift falls on both), and
each run's lines that carry figures are printed under its version.

    python bench/before_after.py 213aa6a --rounds 2 -- dispatch_lag.py --requests 150 --repeats 1
    python bench/before_after.py 213aa6a -- http_load.py --pairs 1 --requests 60

The earlier commit is checked out once into a temporary worktree (git worktree add --detach); the script itself
and bench/common.py come from this checkout, so both versions run the same measurement. Where the script imports
a module the earlier version names differently, it runs the earlier commit's own copy of the script instead.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = re.compile(r"(p50|p99|max|tok/s|requests/s|lag|ratio|×|ms)", re.I)


def checkout(revision: str) -> Path:
    place = Path(tempfile.gettempdir()) / f"benchd-before-{revision}"
    if not (place / "src").is_dir():
        subprocess.run(["git", "worktree", "add", "--detach", "-f", str(place), revision], cwd=ROOT, check=True,
                       capture_output=True)
    return place


def run(tree: Path, script: list[str]) -> tuple[int, str]:
    """The script with benchd imported from tree's src/ (this checkout's script; the tree's own if it is newer
    than what that tree can import)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(ROOT / "bench")]),
           "PYTHONUNBUFFERED": "1"}
    path = ROOT / "bench" / script[0]
    done = subprocess.run([sys.executable, str(path), *script[1:]], env=env, cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0 and ("ImportError" in done.stderr or "ModuleNotFoundError" in done.stderr):
        own = tree / "bench" / script[0]
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), str(tree / "bench")])
        done = subprocess.run([sys.executable, str(own), *script[1:]], env=env, cwd=tree, capture_output=True,
                              text=True)
    return done.returncode, done.stdout + (done.stderr[-2000:] if done.returncode else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", help="the earlier commit (any revision git knows)")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs, the order alternating each round")
    parser.usage = "%(prog)s BEFORE [--rounds N] -- SCRIPT [ARGS]  (SCRIPT: a script in bench/)"
    argv = sys.argv[1:]
    # Everything after the first -- is the script's (argparse's REMAINDER after a positional would take --rounds).
    cut = argv.index("--") if "--" in argv else len(argv)
    args, script = parser.parse_args(argv[:cut]), argv[cut + 1:]
    if not script:
        parser.error("give the script after --")
    trees = {f"before ({args.before})": checkout(args.before), "after (this checkout)": ROOT}
    order = list(trees)
    failed = 0
    for round_ in range(args.rounds):
        for label in order if round_ % 2 == 0 else order[::-1]:
            code, output = run(trees[label], script)
            failed += code != 0
            print(f"\n== round {round_ + 1}, {label}: {' '.join(script)} (exit {code})", flush=True)
            print("\n".join(line for line in output.splitlines() if FIGURES.search(line)) or output[-3000:],
                  flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
