"""How far a stage ran from the hardware: the forward steps its engine counted, the bytes and FLOPs each step must
move and do by the model's shape, and the fastest those steps could run on the device's measured limits (each step
bound by its bandwidth or its compute, whichever binds). Model-based estimates; the formulas and what they leave out
are in docs/figures.md ("How far from the hardware")."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from benchd.models.flops import Shape

BANDWIDTH, COMPUTE = "bandwidth", "compute"


@dataclass(slots=True)
class StepLog:
    """The forward steps an engine ran, a row a step, appended by the engine's own loop as it schedules the step
    (not by a forward hook, which a CUDA graph's replay skips). A row, summed over the step's requests: prefill and
    decode tokens (a prompt's tokens, and those after it); KV-cache tokens read (each request's past); attended
    (query, key) pairs, causal (q new tokens after p cached attend q·p + q(q+1)/2); and rows sampled (tokens
    produced: the logits a step computes). A row is one tuple, appended and taken whole: the engine's thread and a
    stage's never see half a step."""

    rows: list[tuple[int, int, int, int, int]] = field(default_factory=list)

    def add(self, prefill: int, decode: int, kv_read: int, attended: int, sampled: int) -> None:
        self.rows.append((prefill, decode, kv_read, attended, sampled))

    def __len__(self) -> int:
        return len(self.rows)

    def since(self, mark: int) -> StepLog:
        """The steps from the mark (len() taken before a stage) on."""
        return StepLog(self.rows[mark:])

    def take(self, mark: int) -> StepLog:
        """The steps from the mark on, and those before forgotten: a warm engine's log stays one stage long."""
        end = len(self.rows)
        taken = StepLog(self.rows[mark:end])
        del self.rows[:end]
        return taken

    def columns(self) -> tuple[tuple[int, ...], ...]:
        """prefill_tokens, decode_tokens, kv_read_tokens, attended, sampled: a column a figure (events.Steps)."""
        return tuple(zip(*self.rows)) if self.rows else ((),) * 5

    @classmethod
    def of_columns(cls, *columns) -> StepLog:
        return cls(list(zip(*columns)))

    @property
    def prefill_tokens(self) -> list[int]:
        return [row[0] for row in self.rows]

    @property
    def decode_tokens(self) -> list[int]:
        return [row[1] for row in self.rows]

    @property
    def kv_read_tokens(self) -> list[int]:
        return [row[2] for row in self.rows]

    @property
    def attended(self) -> list[int]:
        return [row[3] for row in self.rows]

    @property
    def sampled(self) -> list[int]:
        return [row[4] for row in self.rows]


def row_work(past: int, query: int, prompt: int, sampled: bool) -> tuple[int, int, int, int, int]:
    """One row's share of a step (StepLog.add's arguments, summed over the step's rows): query new tokens after past
    cached ones, of a request whose prompt is prompt tokens long; sampled: the row produces a token."""
    prefill = max(0, min(past + query, prompt) - past)
    return prefill, query - prefill, past, query * past + query * (query + 1) // 2, int(sampled)


@dataclass(frozen=True, slots=True)
class ModelCost:
    """What one step costs by the model's shape: weight_bytes, the weights a step streams from memory (once a step,
    whatever its tokens); kv_bytes_per_token, K and V of one token in every layer."""

    shape: Shape
    weight_bytes: int
    kv_bytes_per_token: int

    @classmethod
    def of(cls, shape: Shape, weight_bytes: int, element_bytes: int) -> ModelCost:
        return cls(shape, weight_bytes, 2 * shape.layers * shape.kv_heads * shape.head_dim * element_bytes)

    def as_dict(self) -> dict:
        return {"shape": asdict(self.shape), "weight_bytes": self.weight_bytes,
                "kv_bytes_per_token": self.kv_bytes_per_token}

    @classmethod
    def from_dict(cls, data: dict) -> ModelCost:
        return cls(Shape(**data["shape"]), data["weight_bytes"], data["kv_bytes_per_token"])

    def token_flops(self) -> int:
        """Matmul FLOPs of one token through the layers' projections and MLP (2 a multiply-add), attention's
        scores and the head aside."""
        s = self.shape
        q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
        mlp = (3 if s.gated_mlp else 2) * 2 * s.hidden * s.ffn
        return s.layers * (2 * s.hidden * q + 2 * 2 * s.hidden * kv + 2 * q * s.hidden + mlp)

    def pair_flops(self) -> int:
        """One attended (query, key) pair in every layer: Q·Kᵀ and P·V, 2 FLOPs a multiply-add each."""
        return self.shape.layers * 2 * 2 * self.shape.heads * self.shape.head_dim

    def head_flops(self) -> int:
        """The logits of one sampled row."""
        return 2 * self.shape.hidden * self.shape.vocab

    def step_flops(self, tokens: int, attended: int, sampled: int) -> int:
        return tokens * self.token_flops() + attended * self.pair_flops() + sampled * self.head_flops()

    def step_bytes(self, tokens: int, kv_read: int) -> int:
        """The weights, the cached K and V the step reads, and the new tokens' K and V it writes."""
        return self.weight_bytes + (kv_read + tokens) * self.kv_bytes_per_token


@dataclass(frozen=True, slots=True)
class Roofline:
    """A stage's steps against the device's limits: bytes_per_s (measured copy bandwidth) and flops_per_s (measured
    matmul rate in the run's dtype)."""

    steps: int
    prefill_tokens: int
    decode_tokens: int
    bytes: int
    flops: int
    elapsed_s: float
    bound_s: float  # the fastest these steps could run: each at max(its bytes / bandwidth, its FLOPs / compute)
    bandwidth_bound_steps: int  # steps whose bytes take longer than their FLOPs
    peak_bytes_per_s: float
    peak_flops_per_s: float

    @property
    def achieved_bytes_per_s(self) -> float:
        return self.bytes / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def achieved_flops_per_s(self) -> float:
        return self.flops / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mbu(self) -> float:
        """Model bandwidth utilisation: achieved bytes/s over the device's."""
        return self.achieved_bytes_per_s / self.peak_bytes_per_s if self.peak_bytes_per_s > 0 else 0.0

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: achieved FLOP/s over the device's."""
        return self.achieved_flops_per_s / self.peak_flops_per_s if self.peak_flops_per_s > 0 else 0.0

    @property
    def of_bound(self) -> float:
        """The fraction of the roofline bound reached: bound_s / elapsed_s (1: as fast as the hardware allows)."""
        return self.bound_s / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs a byte moved."""
        return self.flops / self.bytes if self.bytes else 0.0

    @property
    def bound_by(self) -> str:
        """The ceiling most of the steps sit under."""
        return BANDWIDTH if 2 * self.bandwidth_bound_steps >= self.steps else COMPUTE

    def as_dict(self) -> dict[str, float | int | str]:
        return {"steps": self.steps, "prefill_tokens": self.prefill_tokens, "decode_tokens": self.decode_tokens,
                "bytes": self.bytes, "flops": self.flops, "elapsed_s": self.elapsed_s, "bound_s": self.bound_s,
                "bandwidth_bound_steps": self.bandwidth_bound_steps, "bound_by": self.bound_by,
                "peak_bytes_per_s": self.peak_bytes_per_s, "peak_flops_per_s": self.peak_flops_per_s,
                "achieved_bytes_per_s": self.achieved_bytes_per_s, "achieved_flops_per_s": self.achieved_flops_per_s,
                "mbu": self.mbu, "mfu": self.mfu, "of_bound": self.of_bound, "intensity": self.intensity}


def roofline(log: StepLog, cost: ModelCost, elapsed_s: float, peak_bytes_per_s: float,
             peak_flops_per_s: float) -> Roofline:
    """The stage's steps (log), costed by the model (cost), over the time they took (elapsed_s)."""
    total_bytes = total_flops = bandwidth_bound = 0
    bound_s = 0.0
    for prefill, decode, kv_read, attended, sampled in log.rows:
        step_bytes = cost.step_bytes(prefill + decode, kv_read)
        step_flops = cost.step_flops(prefill + decode, attended, sampled)
        memory_s, compute_s = step_bytes / peak_bytes_per_s, step_flops / peak_flops_per_s
        bound_s += max(memory_s, compute_s)
        bandwidth_bound += memory_s >= compute_s
        total_bytes += step_bytes
        total_flops += step_flops
    return Roofline(steps=len(log), prefill_tokens=sum(log.prefill_tokens), decode_tokens=sum(log.decode_tokens),
                    bytes=total_bytes, flops=total_flops, elapsed_s=elapsed_s, bound_s=bound_s,
                    bandwidth_bound_steps=bandwidth_bound, peak_bytes_per_s=peak_bytes_per_s,
                    peak_flops_per_s=peak_flops_per_s)


def utilisation(figures: Iterable[Mapping | None]) -> dict[str, float] | None:
    """MBU, MFU and the fraction of the bound, each the mean over runs' stage figures (Roofline.as_dict()); None
    when none has them."""
    present = [f for f in figures if f]
    if not present:
        return None
    return {name: sum(f[name] for f in present) / len(present) for name in ("mbu", "mfu", "of_bound")}


def moved_toward(before: Mapping | None, after: Mapping | None) -> str | None:
    """Which ceiling a variant moved toward against another (figures with mbu and mfu, as utilisation() gives):
    the one whose utilisation rose more; None when neither rose (or either is unknown). Read for a faster variant:
    a quantized model that moves fewer bytes may run faster at a lower MBU and a higher MFU."""
    if not before or not after:
        return None
    gain_bandwidth, gain_compute = after["mbu"] - before["mbu"], after["mfu"] - before["mfu"]
    if max(gain_bandwidth, gain_compute) <= 0:
        return None
    return BANDWIDTH if gain_bandwidth >= gain_compute else COMPUTE
