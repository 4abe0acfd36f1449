"""MoE decode workloads: public model shapes, routing of a decode batch to experts, and per-expert GEMM problems."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from tileprobe.errors import UsageError


@dataclass(frozen=True)
class MoEModel:
    name: str
    hidden: int  # H
    inter: int  # expert intermediate size I
    experts: int  # routed experts
    top_k: int
    shared: int  # shared experts (not routed; not probed here)


# shared/facts.md "MoE shapes", from each model's public config.json.
PRESETS: dict[str, MoEModel] = {m.name: m for m in (
    MoEModel("deepseek-v3", 7168, 2048, 256, 8, 1),
    MoEModel("kimi-k2", 7168, 2048, 384, 8, 1),
    MoEModel("qwen3-235b-a22b", 4096, 1536, 128, 8, 0),
    MoEModel("qwen3-30b-a3b", 2048, 768, 128, 8, 0),
    MoEModel("qwen3-next-80b-a3b", 2048, 512, 512, 10, 1),
    MoEModel("glm-4.5", 5120, 1536, 160, 8, 1),
    MoEModel("glm-4.5-air", 4096, 1408, 128, 8, 1),
    MoEModel("glm-5", 6144, 2048, 256, 8, 1),
    MoEModel("gpt-oss-120b", 2880, 2880, 128, 4, 0),
    MoEModel("gpt-oss-20b", 2880, 2880, 32, 4, 0),
    MoEModel("mixtral-8x7b", 4096, 14336, 8, 2, 0),
    MoEModel("llama-4-maverick", 5120, 8192, 128, 1, 1),
)}
DEFAULT_PRESET = "deepseek-v3"
DEFAULT_BATCHES = (1, 8, 32, 128, 512)
ROUTINGS = ("uniform", "balanced", "skewed")


@dataclass(frozen=True)
class Point:
    """One workload point: a list of per-expert problems (M tokens, N, K) in model space, plus its labels."""
    workload: str
    gemm: str  # gate_up, down, or "shape"
    batch: int
    routing: str
    problems: tuple[tuple[int, int, int], ...]

    @property
    def experts_active(self) -> int:
        return len(self.problems)

    def label(self) -> str:
        ms = [p[0] for p in self.problems]
        n, k = self.problems[0][1], self.problems[0][2]
        return f"E={len(ms)} M={min(ms)}..{max(ms)} N={n} K={k}"

    @property
    def problems_hash(self) -> str:
        """Identity of the exact problem list (every expert's M, N, K in order)."""
        text = ";".join(f"{m},{n},{k}" for m, n, k in self.problems)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def columns(self) -> dict:
        return {"workload": self.workload, "gemm": self.gemm, "batch": self.batch, "routing": self.routing,
                "experts_active": self.experts_active, "problem": self.label(), "problems_hash": self.problems_hash}

    def kernel_problems(self, swap_ab: bool) -> list[tuple[int, int, int]]:
        """Problems as the kernel sees them: tokens in M, or with swap-AB weights in M and tokens in N."""
        return [(n, m, k) if swap_ab else (m, n, k) for m, n, k in self.problems]

    def flops(self) -> float:
        return float(sum(2 * m * n * k for m, n, k in self.problems))

    def bytes_moved(self, act_bits: int, weight_bits: int, sf_vector: int, with_c: bool) -> float:
        """Fewest bytes: active expert weights (N x K of `weight_bits`), activations (M x K of `act_bits`), their
        one-byte scale factors, bf16 outputs (and C if read)."""
        total = 0.0
        for m, n, k in self.problems:
            total += (n * k * weight_bits + m * k * act_bits) / 8
            if sf_vector:
                total += (n * k + m * k) / sf_vector
            total += m * n * 2 * (2 if with_c else 1)
        return total


def route(tokens: int, experts: int, top_k: int, routing: str, rng: random.Random) -> list[int]:
    """Tokens per expert for one decode step: each token picks top_k distinct experts."""
    if routing not in ROUTINGS:
        raise UsageError(f"unknown routing {routing!r}; known: {', '.join(ROUTINGS)}")
    counts = [0] * experts
    if routing == "balanced":
        # assignments dealt round-robin from a random start: every expert within one of the others
        start = rng.randrange(experts)
        for a in range(tokens * top_k):
            counts[(start + a) % experts] += 1
        return counts
    weights = None
    if routing == "skewed":
        ranks = list(range(experts))
        rng.shuffle(ranks)
        weights = [1.0 / (r + 1) ** 1.2 for r in ranks]  # Zipf-like popularity over a random order
    for _ in range(tokens):
        chosen: set[int] = set()
        while len(chosen) < top_k:
            if weights is None:
                chosen.add(rng.randrange(experts))
            else:
                chosen.add(rng.choices(range(experts), weights)[0])
        for e in chosen:
            counts[e] += 1
    return counts


def check_split(model: MoEModel, tp: int, ep: int) -> None:
    """UsageError unless the model's intermediate size splits `tp` ways and its experts `ep` ways."""
    if tp < 1 or ep < 1:
        raise UsageError("--tp and --ep must be at least 1")
    if model.inter % tp:
        raise UsageError(f"{model.name}: intermediate size {model.inter} does not split {tp} ways")
    if model.experts % ep:
        raise UsageError(f"{model.name}: {model.experts} experts do not split {ep} ways")


def model_points(model: MoEModel, batches: list[int], routing: str, tp: int, ep: int, seed: int) -> list[Point]:
    check_split(model, tp, ep)
    if model.top_k > model.experts:
        raise UsageError(f"{model.name}: top-k {model.top_k} > experts {model.experts}")
    inter = model.inter // tp
    local = model.experts // ep
    points = []
    for b in batches:
        if b < 1:
            raise UsageError(f"batch size {b} must be at least 1")
        rng = random.Random(f"{seed}:{model.name}:{b}:{routing}")
        counts = route(b, model.experts, model.top_k, routing, rng)[:local]  # this rank's experts only
        active = [c for c in counts if c > 0]
        if not active:
            continue
        for gemm, n, k in (("gate_up", 2 * inter, model.hidden), ("down", model.hidden, inter)):
            points.append(Point(model.name, gemm, b, routing, tuple((m, n, k) for m in active)))
    return points


def parse_shape(text: str) -> Point:
    """--shape E:M:N:K: E groups of an MxNxK GEMM."""
    try:
        e, m, n, k = (int(x) for x in text.split(":"))
    except ValueError:
        raise UsageError(f"--shape {text!r}: expected E:M:N:K, e.g. 8:16:4096:7168") from None
    if min(e, m, n, k) < 1:
        raise UsageError(f"--shape {text!r}: every extent must be at least 1")
    return Point("shape", "shape", m, "fixed", tuple((m, n, k) for _ in range(e)))


def points_for(presets: list[str] | None, shapes: list[str] | None, batches: list[int] | None, routing: str,
               tp: int, ep: int, seed: int) -> list[Point]:
    points = [parse_shape(s) for s in shapes or []]
    if presets or not shapes:
        for name in presets or [DEFAULT_PRESET]:
            if name not in PRESETS:
                raise UsageError(f"unknown workload {name!r}; known: {', '.join(PRESETS)}")
            points += model_points(PRESETS[name], list(batches or DEFAULT_BATCHES), routing, tp, ep, seed)
    return points
