"""The load-generator benchmarks' server side: the C mock (built here), a local tokenizer, and the mock's own stamps."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TOKEN_TEXT = " a"  # each chunk's text: one token in make_tokenizer's vocabulary, however many are concatenated


def build_mock(work: Path) -> Path:
    """Compile bench/mock_openai.c (a C compiler is on any host that runs Triton)."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise SystemExit("no C compiler (cc, gcc or clang) on PATH: the mock server is built from bench/mock_openai.c")
    binary = work / "mock_openai"
    subprocess.run([compiler, "-O2", "-pthread", "-o", str(binary), str(HERE / "mock_openai.c")], check=True)
    return binary


class Mock:
    """The mock in its own process (pinned to `cores`), its stamps appended to work/stamps.txt."""

    def __init__(self, binary: Path, work: Path, ttft_ms: float, itl_ms: float, prompt_tokens: int,
                 cores: str | None, threads: int = 1) -> None:
        self.stamps_path = work / "stamps.txt"
        command = [str(binary), "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
                   "--threads", str(threads), "--prompt-tokens", str(prompt_tokens), "--text", TOKEN_TEXT,
                   "--stamps", str(self.stamps_path)]
        if cores:
            command = ["taskset", "-c", cores, *command]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.port = int(self.process.stdout.readline().split()[1])
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def stamps(self, since: float, until: float) -> Truth:
        """The requests the mock read between two time.monotonic() readings (the same clock as its stamps)."""
        urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_flush", timeout=10).read()
        ttft, itl, itl_request, received = [], [], [], []
        with self.stamps_path.open() as f:
            for line in f:
                t = [int(x) for x in line.split()]
                if since * 1e9 <= t[0] <= until * 1e9 and len(t) > 1:
                    received.append(t[0] / 1e9)
                    ttft.append((t[1] - t[0]) / 1e9)
                    itl.extend((b - a) / 1e9 for a, b in zip(t[1:], t[2:]))
                    if len(t) > 2:
                        itl_request.append((t[-1] - t[1]) / 1e9 / (len(t) - 2))
        return Truth(np.array(ttft), np.array(itl), np.array(itl_request), np.array(sorted(received)))

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@dataclass
class Truth:
    ttft_s: np.ndarray  # first chunk written − request read, per request
    itl_s: np.ndarray  # gaps between chunk writes
    itl_request_s: np.ndarray  # each request's mean gap: (last chunk − first) / (chunks − 1)
    received_s: np.ndarray  # when each request was read, sorted

    @property
    def received_rps(self) -> float:
        """The rate the server saw: requests read per second between the first and the last."""
        r = self.received_s
        return (len(r) - 1) / (r[-1] - r[0]) if len(r) > 1 and r[-1] > r[0] else 0.0

    def pct(self, which: str, q: float) -> float | None:
        values = getattr(self, which)
        return float(np.percentile(values, q)) if len(values) else None


def make_tokenizer(path: Path) -> Path:
    """A byte-level BPE tokenizer of 512 ids saved for AutoTokenizer (no hub): the prompts' and counts' tokenizer
    for every tool. TOKEN_TEXT repeated n times encodes to exactly n tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    rng = random.Random(0)
    tokenizer.train_from_iterator(["".join(rng.choices("abcdefghijklmnopqrstuvwxyz  ", k=400)) for _ in range(400)],
                                  trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    fast.save_pretrained(path)
    for n in (1, 16, 1024):
        assert len(fast.encode(TOKEN_TEXT * n, add_special_tokens=False)) == n, "TOKEN_TEXT is not one token"
    return path


def wait_idle(seconds: float = 2.0) -> float:
    """The 1-minute load average after a short pause: printed beside each row, since these machines are shared."""
    time.sleep(seconds)
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])
