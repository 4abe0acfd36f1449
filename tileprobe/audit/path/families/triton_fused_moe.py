"""SGLang's fused MoE experts: its Triton `fused_moe_kernel`, with the config SGLang picks on the target.

SGLang (the releases its manifests list) runs its routed experts through the Triton fused MoE
(sglang/srt/layers/moe/fused_moe_triton) on sm_120 by default. The kernel is Triton, but it is not one of the audit's
captured launchers: the config each launch gets comes from SGLang's own lookup, which tileprobe's triton-moe family
already follows (the user folder, the shipped file for the exact device name, else SGLang's default, shared-memory aware
on small-opt-in GPUs: tileprobe.engines.sglang, tileprobe.engines.triton_lookup), and its bytes from the triton-moe
rules (tileprobe.predict.triton_moe, checked exact against Triton 3.8.0's own compile) or Triton's allocation pass.

- arch: Triton compiles the kernel for the device at its first launch (no shipped binary: never no-code on sm_80+);
  evidence `compiled` when a launch was sized by Triton for the target here, else `quoted`.
- gate: SGLang's lookup gave a config for every M asked (an engine-error pick, a TMA config tileprobe does not
  reproduce, is `unanswered`).
- bytes: the largest metadata.shared of the distinct launches over the decode or prefill token counts asked.

Params: engine, experts, top_k, hidden, inter (per rank), tp, quant (None / fp8 / fp8-block), tokens (list).
"""

from __future__ import annotations

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered
from tileprobe.backends.triton import allocate
from tileprobe.backends.triton.compile import TritonCompileError, compile_job
from tileprobe.backends.triton.toolchain import require_triton
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe as tm
from tileprobe.triton import sweep
from tileprobe.triton.predicted import predict_launch
from tileprobe.workloads import MoEModel

NAME = "triton-fused-moe"
LIBRARY = "SGLang Triton fused MoE"
QUANTS = {None: "bf16", "fp8": "fp8", "fp8-block": "fp8-block"}


def _size(p, source, triton, ctx: Context) -> tuple[int | None, str]:
    pred = predict_launch(p.config, source, triton.version)
    if isinstance(pred, int):
        return pred, "predicted"
    # Triton's allocation pass alone where tileprobe.backends.triton.allocate runs under this Triton, else the compile
    whole = allocate.unavailable() is not None
    build = compile_job(p.job.compiled() if whole else p.job.sized(), str(ctx.cache_dir))
    if isinstance(build, TritonCompileError):
        return None, f"compile error: {build.line}"
    return build.shared, "compiled" if whole else "sized"


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    quant = call.param("quant")
    if quant not in QUANTS:
        why = f"quantization {quant}: tileprobe's triton-moe family answers bf16, fp8 and fp8-block only"
        return CompiledAnswer("fused_moe_kernel", unanswered(why), unanswered(why), unanswered(why))
    quant = QUANTS[quant]
    target, engine = ctx.target, call.param("engine")
    try:
        # the audit applied the release rule at its start (tileprobe.audit.run: refused, or every rule off)
        src, source = sweep.engine_kernel_source(engine, ctx.engine_source.origin, rules_off=True)
        triton = require_triton()
        model = MoEModel(f"{engine}-moe", call.param("hidden"), int(call.param("inter")) * call.param("tp", 1),
                         call.param("experts"), call.param("top_k"), 0)
        shape = sweep.Shape(model, call.param("tp", 1), 1)
        tokens = sorted(set(call.param("tokens") or [1]))
        planned = sweep.plan(shape, engine, quant, source, src, target, target.arch, (target.device_name,),
                             tokens, None, max(tokens))
    except UsageError as exc:
        why = str(exc)
        return CompiledAnswer("fused_moe_kernel", unanswered(why), unanswered(why), unanswered(why))
    skipped = [p for p in planned if p.job is None]
    sizes, how, configs = [], set(), []
    for p in planned:
        if p.job is None:
            continue
        b, h = _size(p, source, triton, ctx)
        if b is None:
            return CompiledAnswer("fused_moe_kernel", Part(f"Triton {triton.version} compiles it for "
                                                           f"{target.arch}", True, "compiled"),
                                  Part(f"{p.config.name}: {h}", False, "compiled"), Part(h, False, "compiled"))
        sizes.append((b, p))
        how.add(h)
        configs.append(f"{p.point['gemm']} M={p.point['batch']} {p.config.tile} s{p.config.stages} "
                       f"({p.config.get('config_source')}): {b} B")
    if not sizes:
        why = skipped[0].config.unsupported_reason if skipped else "no launch planned"
        return CompiledAnswer("fused_moe_kernel", unanswered(why), unanswered(why), unanswered(why))
    worst, p = max(sizes, key=lambda s: s[0])
    arch = Part(f"Triton {triton.version} JIT-compiles fused_moe_kernel for {target.arch} at first launch",
                True, "compiled" if how & {"sized", "compiled"} else "quoted")
    gate = Part(f"{engine}'s config lookup gave a config for each M ({', '.join(map(str, tokens))}); "
                f"{len(skipped)} launches not reproduced" if skipped else
                f"{engine}'s config lookup gave a config for each M ({', '.join(map(str, tokens))})",
                None if skipped else True, "quoted")
    evidence = "compiled" if how <= {"sized", "compiled"} else "predicted"
    bytes_ = Part(f"largest metadata.shared {worst} B ({p.point['gemm']}, M={p.point['batch']}; "
                  f"{'/'.join(sorted(how))}): " + "; ".join(dict.fromkeys(configs)), worst <= target.smem_optin,
                  evidence)
    return CompiledAnswer(f"fused_moe_kernel {quant} E={call.param('experts')} N={call.param('inter')}",
                          arch, gate, bytes_, smem_bytes=worst)
