"""vLLM's fused_moe_kernel launch for one config entry, formed by the engine itself: `tileprobe check-configs` and
`tileprobe export triton-configs` ask the release's own launcher (read from the wheel) how it launches an entry, so
the bound arguments are that release's, whatever parameters its kernel gained (the newer manifest release's
`b_desc`, `a_desc`, `USE_TMA_A/B`, `C_IS_SORTED`, and `group_n`/`group_k` moved).

How: the audit's capture machinery (tileprobe.audit.capture, with the stand-ins of tileprobe.audit.entries.vllm_moe:
the same served modules, so the release's manifest covers every engine file that runs) serves
vllm/model_executor/layers/fused_moe/fused_moe.py from the wheel under the target's stand-in device and calls its
`fused_experts_impl` with the entry as vLLM's override config (`fused_moe.get_config()`: try_get_optimal_moe_config
returns it before any file is read). The engine then does everything itself: the expert assignment (the naive path
or moe_align_block_size's buffers), the activation quantization's shapes, and both `dispatch_fused_moe_kernel ->
invoke_fused_moe_triton_kernel` calls (gate_up, then down with top_k 1), each a recorded `fused_moe_kernel[grid]
(...)` that is never launched. The recorded launch becomes the compile job (tileprobe.audit.jobs.job_of: every
parameter by name, ints by Triton's specialisation class), built from the same cut kernel module the commands
compile (so the predictor and the compile cache key by it). One difference from the modular path vLLM's oracle
selects (TritonExperts.apply): fused_experts_impl passes the router weights to the gate_up launch, TritonExperts
None; both launch it with MUL_ROUTED_WEIGHT False, so the pointer is never read (the test compiles both: same bytes).

The stand-in tensors are meta tensors (shapes, strides, dtypes; no memory), as the audit's; the expert weights
(w1, w2) answer `device.type == "cuda"`, as they do in the engine, so a launcher test on the weights' device (the
newer launcher's `use_tma_b`: fp8 [128, 128] blocks on capability family 9.0 or 10.0, B contiguous and divisible by
the tile) decides as it does on the GPU. Each launch says which path it took (`Captured.path`, and in words
`Captured.said`, which the rows' reasons and the export's provenance carry): `TMA` (B, and A where the engine sorts
it, read through host TMA descriptors: the job compiles with those descriptors, Triton's `tensordesc<...>`
arguments) or `pointer` (no descriptor). On sm_120 (no 9.0/10.0 family) vLLM takes the pointer path.

Where the engine manifest records tileprobe's re-typed launch (tileprobe.families.triton_moe.launch_job, manifest
piece triton_moe.PIECE) as checked for the release, the commands keep that faster path (no torch, no capture);
tests/triton/test_captured_launch.py proves it binds what the capture records on such a release. Everywhere else (a
release whose manifest records the piece as not holding, or any --rules-off read) the capture answers. SGLang's
launch is re-typed (triton_moe._sglang_args) and keeps needing the piece.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from tileprobe.audit import capture
from tileprobe.audit import jobs as audit_jobs
from tileprobe.audit import vllm_moe_stand_ins
from tileprobe.audit.entries import vllm_moe
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.backends.triton.source import KernelSource
from tileprobe.engines import manifest
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.lazy import LazyModule
from tileprobe.targets import Target

torch = LazyModule("torch")

PACKAGE = "vllm.model_executor.layers.fused_moe"
ENGINES = ("vllm",)  # engines whose launch can be captured here
# entry keys the engine's launcher reads beyond the six (the newer launcher pops USE_TMA, default True)
ENGINE_KEYS = ("USE_TMA",)


def retyped(src: EngineSource, banner: str = "") -> bool:
    """Whether the commands may use tileprobe's re-typed launch for this release: it matches its manifest (no
    --rules-off `banner`) and the manifest records the piece as checked (the re-typed arguments bind to its
    kernel). SGLang's launch is only re-typed."""
    if src.engine not in ENGINES:
        return True
    want = manifest.read(src.engine, src.version) or {}
    return not banner and bool(want.get("pieces", {}).get(tm.PIECE, {}).get("checked"))


def needs(engine: str) -> str | None:
    """The manifest piece a check-configs / export of this release relies on (None: the launch is captured)."""
    return tm.PIECE if engine not in ENGINES else None


@dataclass(frozen=True)
class Request:
    """One entry launch to form: the scheme, the GEMM (N, K as the kernel sees them), the model's global experts,
    batch M, top_k, expert-parallel ways, and the entry (the six keys, plus any ENGINE_KEYS it carries)."""
    quant: str
    gemm: str
    experts: int
    n: int
    k: int
    m: int
    top_k: int
    entry: tuple  # sorted (key, value) items
    ep: int = 1

    def sizes(self) -> tuple[int, int]:
        """(hidden, intermediate per rank) of the layer: gate_up N = 2*I/tp, K = H; down N = H, K = I/tp."""
        return (self.k, self.n // 2) if self.gemm == "gate_up" else (self.n, self.k)

    def layer(self) -> tuple:
        """What one fused_experts_impl call is: both GEMMs of the layer for this entry and M."""
        return (self.quant, *self.sizes(), self.experts, self.ep, self.m, self.top_k, self.entry)


def request(quant: str, gemm: str, experts: int, n: int, k: int, m: int, top_k: int, entry: dict, raw: dict | None,
            ep: int = 1) -> Request:
    """A Request for `entry` (tm.check_entry's six keys); `raw`: the file's entry, for the ENGINE_KEYS it carries."""
    extra = {key: raw[key] for key in ENGINE_KEYS if raw and key in raw}
    if gemm == "gate_up" and n % 2:
        raise UsageError(f"gate_up N={n} is not 2 x the intermediate size")
    return Request(quant, gemm, experts, n, k, m, top_k, tuple(sorted({**entry, **extra}.items())), ep)


@dataclass(frozen=True)
class Captured:
    job: KernelJob
    path: str  # "TMA" or "pointer"
    said: str  # the launch in words: release, engine line, path

    @property
    def tma(self) -> bool:
        return self.path == "TMA"


def _meta(shape, dtype):
    return torch.empty(shape, dtype=dtype, device="meta")


def layer_arguments(layer: tuple):
    """fused_experts_impl's arguments for one layer (as tileprobe.audit.entries.vllm_moe.arguments builds them, with
    an expert map of the global experts when ep > 1: the rank holds experts / ep)."""
    quant, hidden, inter, experts, ep, m, top_k, _ = layer
    if experts % ep:
        raise UsageError(f"{experts} experts do not split over ep {ep}")
    local = experts // ep
    wdt = torch.bfloat16 if quant == "bf16" else torch.float8_e4m3fn
    args = (_meta((m, hidden), torch.bfloat16), vllm_moe_stand_ins.expert_weight((local, 2 * inter, hidden), wdt),
            vllm_moe_stand_ins.expert_weight((local, hidden, inter), wdt), _meta((m, top_k), torch.float32), _meta((m, top_k), torch.int32))
    kwargs = dict(activation="silu", apply_router_weight_on_input=False, global_num_experts=experts,
                  expert_map=_meta((experts,), torch.int32) if ep > 1 else None)
    if quant == "fp8":
        kwargs |= dict(use_fp8_w8a8=True, w1_scale=_meta((local,), torch.float32),
                       w2_scale=_meta((local,), torch.float32))
    elif quant == "fp8-block":
        b = tm.BLOCK
        kwargs |= dict(use_fp8_w8a8=True, block_shape=[b, b],
                       w1_scale=_meta((local, -(-2 * inter // b), -(-hidden // b)), torch.float32),
                       w2_scale=_meta((local, -(-hidden // b), -(-inter // b)), torch.float32))
    return args, kwargs


def _path(launch: capture.Launch) -> str:
    return "TMA" if launch.arg("USE_TMA_B") or launch.arg("USE_TMA_A") else "pointer"


def _said(src: EngineSource, launch: capture.Launch) -> str:
    if _path(launch) == "TMA":
        descs = ", ".join(f"{n} {launch.arg(n)}" for n in ("b_desc", "a_desc") if launch.arg(n) is not None)
        how = f"TMA path ({descs})"
    else:
        how = "pointer path (no TMA descriptor" + (", USE_TMA_B False)" if launch.arg("USE_TMA_B") is not None
                                                   else ")")
    return f"{src.label()}'s own launch at {launch.call_site}, {how}"


def launches(src: EngineSource, source: KernelSource, target: Target, cc: int, requests: list[Request],
             cache_dir=None) -> list[Captured]:
    """The engine's launch for every request, on `target` (its stand-in device; `cc` the compile's capability): one
    fused_experts_impl call per distinct layer, in one engine session. UsageError (one line) when the engine's code
    refuses the arguments or launches something else."""
    if src.engine not in ENGINES:
        raise UsageError(f"{src.label()}: its fused_moe_kernel launch is not captured here")
    layers = list(dict.fromkeys(r.layer() for r in requests))
    got: dict[tuple, tuple] = {}
    with capture.engine_session(src, target, vllm_moe.ALLOW, vllm_moe.vllm_moe_stand_ins.STAND_INS,
                                cache_dir) as session:
        impl = session.module(vllm_moe.MODULE).fused_experts_impl
        scope = sys.modules[PACKAGE].get_config.__globals__  # the override config vLLM's get_config returns
        trace = sys.gettrace()
        sys.settrace(None)  # the launch's own arguments say its path; no line tracing needed (and 4x faster)
        try:
            for layer in layers:
                start = len(session.launches)
                scope["_config"] = dict(layer[-1])
                try:
                    args, kwargs = layer_arguments(layer)
                    impl(*args, **kwargs)
                except (AssertionError, ValueError, RuntimeError, TypeError, KeyError) as exc:
                    raise UsageError(f"{src.label()} fused_experts_impl refuses entry {dict(layer[-1])} "
                                     f"({layer[0]}, M={layer[5]}): {type(exc).__name__}: {exc}") from None
                finally:
                    scope["_config"] = None
                made = session.launches[start:]
                if [la.kernel for la in made] != ["fused_moe_kernel"] * 2:
                    raise UsageError(f"{src.label()} fused_experts_impl launched {[la.kernel for la in made]}, not "
                                     "fused_moe_kernel twice (gate_up, down)")
                got[layer] = tuple(made)
        finally:
            sys.settrace(trace)
    out = []
    for r in requests:
        launch = got[r.layer()][0 if r.gemm == "gate_up" else 1]
        job = audit_jobs.job_of(src, launch, cc, lambda s, la: source)
        out.append(Captured(job, _path(launch), _said(src, launch)))
    return out
