"""Launch the engines' fused_moe_kernel on a GPU (or Triton's CPU interpreter): real tensors for a decode batch,
the engine's alignment of tokens to expert blocks, an element-wise check against an independent torch reference,
and L2-proof timing from a CUDA graph.

The launch is the one tileprobe.families.triton_moe.launch_job reproduces for the no-GPU compile: its integer
arguments and constexprs are used as they are, and each pointer stand-in is replaced by the real tensor at that
position of the engine's call (POINTERS); a None stays None (vLLM passes no router weights to its gate_up GEMM).

Data: A and B uniform in [-1, 1) (never zeros), fresh per run from the seed; routing per token: top_k distinct
experts drawn as the other families' `uniform` routing; router weights uniform in (0, 1]. fp8 w8a8 per-tensor: one
scale for A, one per expert for B; fp8 block [128, 128]: a scale per (token, 128 of K) and per (128 of N, 128 of K),
each amax / 448, values rounded to e4m3 by torch. Each scale's values get a random magnitude of their own in
[0.1, 1) (each expert's B for fp8, each block for fp8 block), so that no two scales are alike: with uniform values
alone every amax is ~1 and every scale ~1/448, and a kernel applying another expert's or block's scale passes. B is made and quantized one expert at a time (no fp32 copy of all
of B: deepseek-v3's gate_up would be 30 GB). The reference computes every (token, expert) product in fp64 from the
same (dequantized) values the kernel reads, so it shares no code with the kernel: one fp64 GEMM per active expert
(only those experts' weights are dequantized, one at a time), once per problem and seed (`prepare`), reused by every
config launched on those inputs. The check is tileprobe.results.tolerance.check with the bound the caller derives
from the kernel's contract (tolerance.for_config): groups are experts (rms over an expert's slots).

Fault switch (TILEPROBE_FAULT, the CUTLASS harness's, cutlass_harness/PROTOCOL.md): `corrupt:POINT:GROUP` makes
the sweep's point POINT (the index of its (GEMM, M) in the sweep's order: the rows' point_id) corrupt, after each
config's checked launch and before the check, the block the harness corrupts: up to 64 output rows (token slots) of
GROUP, columns 0..127, each element v becoming -(v + 8 sign(v)). GROUP counts the point's groups as the check does:
its active experts in ascending id (the row's worst_group is the expert's id); one beyond them fails the launch as
launch-error. `sticky` and `hang` are the harness's only: refused here.

Timing: R routings, the experts of each shifted by a different offset, so the expert weights R consecutive launches
read span at least 4x the L2 (or every expert once); a CUDA graph of those R launches is replayed, and its median
per launch is `us_graph_median`; `us_median` times the same launches one by one.
"""

from __future__ import annotations

import math
import os
import random
import re
import statistics
from dataclasses import dataclass

from tileprobe.backends.triton.compile import KernelJob
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.results import tolerance

torch = LazyModule("torch")

FP8_MAX = 448.0
BLOCK = 128
L2_SPAN = 4
FAULT_ENV = "TILEPROBE_FAULT"
CORRUPT_ROWS, CORRUPT_COLS = 64, 128  # the block the harness corrupts (faults.cuh kCorruptRows, kCorruptCols)


@dataclass(frozen=True)
class Problem:
    engine: str
    quant: str
    gemm: str
    experts: int
    n: int
    k: int
    m: int  # tokens in the batch
    top_k: int


def route(m: int, experts: int, top_k: int, rng: random.Random) -> list[list[int]]:
    """Each token's top_k distinct experts (uniform, as tileprobe.workloads.route's `uniform`)."""
    return [rng.sample(range(experts), top_k) for _ in range(m)]


def align(engine: str, topk_ids, bm: int, experts: int, naive: bool):
    """The engine's moe_align_block_size: token slots (t * top_k + j) sorted by expert, each expert's run padded to a
    multiple of BLOCK_SIZE_M with the sentinel numel; one expert id per block; tokens after padding. vLLM's naive
    assignment (no sorting: one slot per block) when `naive`. Lengths as the engines allocate them."""
    flat = topk_ids.reshape(-1).to(torch.int32)
    numel = flat.numel()
    dev = flat.device
    if naive:
        return None, flat.clone(), torch.tensor([numel * bm], dtype=torch.int32, device=dev)
    if engine == "vllm":
        padded = numel + experts * (bm - 1)
        if numel < experts:
            padded = min(numel * bm, padded)
    else:
        padded = numel * bm if numel < experts + 1 else numel + (experts + 1) * (bm - 1)
        padded = (padded + 3) // 4 * 4
    ids = flat.cpu().tolist()
    order, blocks = [], []
    for e in range(experts):
        slots = [i for i, x in enumerate(ids) if x == e]
        if not slots:
            continue
        slots += [numel] * ((-len(slots)) % bm)
        order += slots
        blocks += [e] * (len(slots) // bm)
    sorted_ids = torch.full((padded,), numel, dtype=torch.int32)
    sorted_ids[:len(order)] = torch.tensor(order, dtype=torch.int32)
    expert_ids = torch.full((math.ceil(padded / bm),), -1, dtype=torch.int32)
    expert_ids[:len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
    return sorted_ids.to(dev), expert_ids.to(dev), torch.tensor([len(order)], dtype=torch.int32, device=dev)


def _quant_rows(x, group: int):
    """Per (row, `group` columns) e4m3 quantization: (values, scales [rows, ceil(cols/group)])."""
    rows, cols = x.shape
    g = math.ceil(cols / group)
    pad = torch.nn.functional.pad(x, (0, g * group - cols)).view(rows, g, group)
    scale = (pad.abs().amax(dim=2) / FP8_MAX).clamp(min=1e-12)
    q = (pad / scale[:, :, None]).to(torch.float8_e4m3fn).view(rows, g * group)[:, :cols]
    return q.contiguous(), scale.float().contiguous()


def _quant_blocks(w):
    """Per (128 of N, 128 of K) block of each expert: (values, scales [E, ceil(N/128), ceil(K/128)])."""
    e, n, k = w.shape
    gn, gk = math.ceil(n / BLOCK), math.ceil(k / BLOCK)
    pad = torch.nn.functional.pad(w, (0, gk * BLOCK - k, 0, gn * BLOCK - n)).view(e, gn, BLOCK, gk, BLOCK)
    scale = (pad.abs().amax(dim=(2, 4)) / FP8_MAX).clamp(min=1e-12)
    q = (pad / scale[:, :, None, :, None]).to(torch.float8_e4m3fn).view(e, gn * BLOCK, gk * BLOCK)[:, :n, :k]
    return q.contiguous(), scale.float().contiguous()


def _block_magnitudes(n: int, k: int, g, device: str, rows_per_block: int = BLOCK):
    """An [n, k] factor, one random magnitude in [0.1, 1) per (rows_per_block x BLOCK) block. Uniform values alone give
    every 128-value block nearly the same amax, so every block scale would be about the same and a kernel that
    applies the wrong block's scale (a BLOCK_SIZE_K spanning two scale blocks) would still pass the check."""
    mags = torch.rand(math.ceil(n / rows_per_block), math.ceil(k / BLOCK), generator=g, device=device) * 0.9 + 0.1
    return mags.repeat_interleave(rows_per_block, 0).repeat_interleave(BLOCK, 1)[:n, :k]


@dataclass
class Tensors:
    a: object
    b: object
    c: object
    a_scale: object
    b_scale: object
    weights: object
    topk_ids: object
    a_ref: object  # the activations the kernel reads, dequantized, fp64
    quant: str

    def b_ref(self, e: int):
        """Expert e's weights as the kernel reads them, dequantized, fp64 (one expert at a time: B can be GBs)."""
        if self.quant == "bf16":
            return self.b[e].double()
        if self.quant == "fp8":
            return self.b[e].double() * self.b_scale[e].double()
        n, k = self.b.shape[1:]
        s = self.b_scale[e].repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)[:n, :k]
        return self.b[e].double() * s.double()


def make_tensors(p: Problem, seed: int, device: str, dtype=None) -> Tensors:
    """The inputs of one launch, made on `device` (dtype: the activations' float type, bf16 as the engines run; the
    CPU interpreter test uses fp32, which Triton's interpreter supports). B is drawn and quantized one expert at a
    time into its final type."""
    dtype = dtype or torch.bfloat16
    g = torch.Generator(device=device).manual_seed(seed)
    rng = random.Random(seed)
    rows = p.m if p.gemm == "gate_up" else p.m * p.top_k
    a = torch.rand(rows, p.k, generator=g, device=device) * 2 - 1
    b = torch.empty(p.experts, p.n, p.k, device=device, dtype=dtype if p.quant == "bf16" else torch.float8_e4m3fn)
    b_scale = None if p.quant == "bf16" else torch.empty(
        (p.experts,) if p.quant == "fp8" else (p.experts, math.ceil(p.n / BLOCK), math.ceil(p.k / BLOCK)),
        dtype=torch.float32, device=device)
    for e in range(p.experts):
        w_e = torch.rand(p.n, p.k, generator=g, device=device) * 2 - 1
        if p.quant == "bf16":
            b[e] = w_e
        elif p.quant == "fp8":
            w_e = w_e * (torch.rand((), generator=g, device=device) * 0.9 + 0.1)  # this expert's own scale
            b_scale[e] = w_e.abs().amax() / FP8_MAX
            b[e] = (w_e / b_scale[e]).to(torch.float8_e4m3fn)
        else:
            q, s = _quant_blocks(w_e[None] * _block_magnitudes(p.n, p.k, g, device))
            b[e], b_scale[e] = q[0], s[0]
    ids = torch.tensor(route(p.m, p.experts, p.top_k, rng), dtype=torch.int32, device=device)
    w = torch.rand(p.m, p.top_k, generator=g, device=device) * 0.9 + 0.1
    a_scale = None
    if p.quant == "bf16":
        a = a.to(dtype)
        a_ref = a.double()
    elif p.quant == "fp8":
        sa = a.abs().amax() / FP8_MAX
        a = (a / sa).to(torch.float8_e4m3fn)
        a_scale = sa.reshape(1).float()
        a_ref = a.double() * sa.double()
    else:
        a, a_scale = _quant_rows(a * _block_magnitudes(rows, p.k, g, device, rows_per_block=1), BLOCK)
        a_ref = a.double() * a_scale.double().repeat_interleave(BLOCK, 1)[:, :p.k]
    c = torch.full((p.m, p.top_k, p.n), float("nan"), dtype=dtype, device=device)  # every element must be written
    return Tensors(a, b, c, a_scale, b_scale, w.float(), ids, a_ref, p.quant)


def reference(p: Problem, t: Tensors):
    """C[token, j] = A[row] @ B[expert]^T in fp64 (row = token for gate_up, token * top_k + j for down; the down
    GEMM multiplies by the router weight): one GEMM per active expert over the rows routed to it."""
    ids = t.topk_ids.long().reshape(-1)
    dev = t.a_ref.device
    out = torch.empty(p.m * p.top_k, p.n, dtype=torch.float64, device=dev)
    slots = torch.arange(p.m * p.top_k, device=ids.device)
    rows_of = slots // p.top_k if p.gemm == "gate_up" else slots
    for e in sorted(set(ids.tolist())):
        mine = slots[ids == e].to(dev)
        v = t.a_ref[rows_of[ids == e].to(dev)] @ t.b_ref(e).T
        out[mine] = v * t.weights.reshape(-1)[mine].double()[:, None] if p.gemm == "down" else v
    return out.view(p.m, p.top_k, p.n)


@dataclass
class Prepared:
    """One problem's inputs and their reference (made once, reused by every config launched on them)."""
    problem: Problem
    seed: int
    tensors: Tensors
    ref: object


def prepare(p: Problem, seed: int, device: str, dtype=None) -> Prepared:
    t = make_tensors(p, seed, device, dtype)
    return Prepared(p, seed, t, reference(p, t))


# Where each engine's launcher passes each tensor (positional index in its fused_moe_kernel call).
POINTERS = {"vllm": {"a": 0, "b": 1, "c": 2, "a_scale": 4, "b_scale": 5, "weights": 6, "sorted": 7, "experts": 8,
                     "padded": 9},
            "sglang": {"a": 0, "b": 2, "c": 5, "a_scale": 6, "b_scale": 7, "weights": 8, "sorted": 9, "experts": 10,
                       "padded": 11}}


def real_args(engine: str, job: KernelJob, tensors: dict) -> list:
    """The job's arguments with each pointer stand-in replaced by the real tensor at that position (a None stand-in
    stays None: the launcher passes None there)."""
    out = list(job.args)
    for name, i in POINTERS[engine].items():
        if isinstance(out[i], str) and out[i].startswith("*"):
            if tensors.get(name) is None:
                raise ValueError(f"{engine} launch: position {i} ({name}) needs a tensor")
            out[i] = tensors[name]
        elif out[i] is not None:
            raise ValueError(f"{engine} launch: position {i} ({name}) is {out[i]!r}, not a pointer")
    return out


def launcher(kernel, job: KernelJob, p: Problem, t: Tensors, sorted_ids, expert_ids, npp):
    """A no-argument callable that launches the kernel once, as the engine does (grid as its launcher's)."""
    fn = kernel  # launched as the engine launches it (a JITFunction; Triton's InterpretedFunction on the CPU)
    kw = {k: _tl_value(v) for k, v in job.kwargs}
    bm, bn = kw["BLOCK_SIZE_M"], kw["BLOCK_SIZE_N"]
    em = job.args[12] if p.engine == "vllm" else job.args[15]
    grid = (math.ceil(em / bm) * math.ceil(p.n / bn),)
    args = real_args(p.engine, job, {"a": t.a, "b": t.b, "c": t.c, "a_scale": t.a_scale, "b_scale": t.b_scale,
                                     "weights": t.weights, "sorted": sorted_ids, "experts": expert_ids, "padded": npp})
    return lambda: fn[grid](*args, **kw)


def _tl_value(v):
    if isinstance(v, str) and v.startswith("tl."):
        tl = LazyModule("triton.language")
        return getattr(tl, v[3:])
    return v


def check(p: Problem, t: Tensors, bound: tolerance.Bound, ref=None) -> dict:
    """Element-wise, every (token, slot, n) element against the fp64 reference under `bound`, grouped by expert
    (tileprobe.results.tolerance.check; NaN: never written)."""
    ref = reference(p, t) if ref is None else ref
    return tolerance.check(t.c.reshape(p.m * p.top_k, p.n), ref.reshape(p.m * p.top_k, p.n), t.topk_ids, bound)


@dataclass(frozen=True)
class Fault:
    """TILEPROBE_FAULT=corrupt:POINT:GROUP (module docstring)."""
    point: int
    group: int

    def group_at(self, point_id: int) -> int | None:
        """The group to corrupt at this point, or None."""
        return self.group if point_id == self.point else None


class FaultError(RuntimeError):
    """The fault names a group the point does not have: that launch's row is launch-error, saying so."""


def parse_fault(text: str | None) -> Fault | None:
    """Unset or empty: no fault; `corrupt:POINT:GROUP` (non-negative decimal integers); anything else is a
    UsageError (one line), `sticky` and `hang` included: the CUTLASS harness makes those, the Triton path does not."""
    if not text:
        return None
    m = re.fullmatch(r"corrupt:([0-9]+):([0-9]+)", text)
    if m:
        return Fault(int(m.group(1)), int(m.group(2)))
    usage = "usage: TILEPROBE_FAULT=corrupt:POINT:GROUP (POINT: a point_id, GROUP: a group index; non-negative " \
            "decimal integers)"
    if re.fullmatch(r"(sticky|hang):[0-9]+", text):
        raise UsageError(f"TILEPROBE_FAULT {text!r}: sticky and hang are the CUTLASS harness's faults; the Triton "
                         f"path (triton-moe) takes corrupt only; {usage}")
    raise UsageError(f"bad TILEPROBE_FAULT {text!r}; {usage}")


def fault_from_env() -> Fault | None:
    return parse_fault(os.environ.get(FAULT_ENV))


def corrupt(p: Problem, t: Tensors, group: int) -> int:
    """TILEPROBE_FAULT corrupt on C as the kernel left it: the harness's block of the point's group `group` (module
    docstring). Returns the expert's id."""
    ids = t.topk_ids.reshape(-1)
    experts = sorted(set(ids.tolist()))
    if group >= len(experts):
        raise FaultError(f"TILEPROBE_FAULT corrupt: group {group} out of range (the point has {len(experts)} groups: "
                         f"its active experts)")
    expert = experts[group]
    rows = (ids == experts[group]).nonzero().flatten()[:CORRUPT_ROWS].to(t.c.device)
    c = t.c.view(p.m * p.top_k, p.n)
    block = c[rows, :CORRUPT_COLS]
    c[rows, :CORRUPT_COLS] = -(block + 8 * block.sign())
    return expert


def time_launches(launches: list, reps: int = 7, per_rep_ms: float = 10.0) -> dict:
    """Median and spread of one launch's time: back to back, and replayed from a CUDA graph of the launches."""
    for f in launches * 2:
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for f in launches:
        f()
    end.record()
    torch.cuda.synchronize()
    est_ms = max(start.elapsed_time(end) / len(launches), 1e-3)
    rounds = max(1, min(400, int(per_rep_ms / (est_ms * len(launches)))))
    plain, graphed = [], []
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for f in launches:  # warm on the capture stream
            f()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for f in launches:
                f()
    torch.cuda.synchronize()
    for _ in range(reps):
        start.record()
        for _ in range(rounds):
            for f in launches:
                f()
        end.record()
        torch.cuda.synchronize()
        plain.append(start.elapsed_time(end) * 1e3 / (rounds * len(launches)))
        start.record()
        for _ in range(rounds):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        graphed.append(start.elapsed_time(end) * 1e3 / (rounds * len(launches)))
    med, gmed = statistics.median(plain), statistics.median(graphed)
    return {"us_median": med, "us_spread": (max(plain) - min(plain)) / med, "us_graph_median": gmed,
            "us_graph_spread": (max(graphed) - min(graphed)) / gmed, "launch_gap_us": med - gmed}


def bytes_moved(p: Problem, active: int) -> float:
    """Fewest bytes one launch moves: the active experts' weights, the activations, the output (bf16)."""
    wbits = 16 if p.quant == "bf16" else 8
    rows = p.m if p.gemm == "gate_up" else p.m * p.top_k
    return active * p.n * p.k * wbits / 8 + rows * p.k * wbits / 8 + p.m * p.top_k * p.n * 2


def rotations(p: Problem, active: int, l2_bytes: int) -> int:
    """How many shifted routings keep R launches' weights at L2_SPAN x the L2 (at most E / active: every expert)."""
    per = active * p.n * p.k * (2 if p.quant == "bf16" else 1)
    want = math.ceil(L2_SPAN * l2_bytes / max(per, 1))
    return max(1, min(want, max(1, p.experts // max(active, 1)), 64))


def run_point(kernel, job: KernelJob, p: Problem, seed: int, device: str, bound: tolerance.Bound,
              l2_bytes: int = 0, naive: bool = False, dtype=None, timed: bool = True,
              prepared: Prepared | None = None, corrupt_group: int | None = None) -> dict:
    """Launch once on fresh inputs (or `prepared`'s, made for this problem and seed) and check every output element
    under `bound`; then (timed, on a GPU) time the launch over rotated routings. Returns the runtime columns, with
    `verified` True when every element is within the bound. `corrupt_group` (TILEPROBE_FAULT): that group's block of
    the output is corrupted after the launch, before the check."""
    if prepared is None or (prepared.problem, prepared.seed) != (p, seed):
        prepared = prepare(p, seed, device, dtype)
    t = prepared.tensors
    t.c.fill_(float("nan"))  # every element must be written by this launch
    bm = dict(job.kwargs)["BLOCK_SIZE_M"]
    first = launcher(kernel, job, p, t, *align(p.engine, t.topk_ids, bm, p.experts, naive))
    first()
    if device != "cpu":
        torch.cuda.synchronize()
    if corrupt_group is not None:
        corrupt(p, t, corrupt_group)
    out = check(p, t, bound, prepared.ref)
    out["verified"] = out["bad_elements"] == 0 and out["nonfinite"] == 0
    if not timed:
        return out
    active = len(set(t.topk_ids.reshape(-1).tolist()))
    r = rotations(p, active, l2_bytes)
    launches = [first]
    for i in range(1, r):
        shifted = (t.topk_ids + i * max(1, p.experts // r)) % p.experts
        launches.append(launcher(kernel, job, p, t, *align(p.engine, shifted, bm, p.experts, naive)))
    out.update(time_launches(launches))
    moved = bytes_moved(p, active)
    out.update(gbps=moved / (out["us_graph_median"] * 1e-6) / 1e9, rotation_bytes=int(r * active * p.n * p.k * (
        2 if p.quant == "bf16" else 1)), l2_bytes=l2_bytes)
    return out
