"""The audit's compiled-kernel pass: after tileprobe.audit.run has captured the Triton launches, the rest of the
model's forward pass (tileprobe.audit.path.forward) is answered kernel by kernel and written as rows beside them.

`check_parallel` runs the engine's own tensor-parallel rules first (tileprobe.audit.path.parallel): a model the
engine refuses at start-up is one line, exit 2, before any kernel is looked at.
"""

from __future__ import annotations

from tileprobe.audit.path import forward, parallel, rows, vllm_router
from tileprobe.audit.path.call import Context
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.models import AttentionConfig

failures = rows.failures
unanswered = rows.unanswered


def check_parallel(source, model: AttentionConfig, tp: int) -> list[str]:
    inter = model.moe.inter if model.moe is not None else None
    return parallel.check(source, model.heads, model.kv_heads, tp, inter)


def _is_moe(entry: str) -> bool:
    return "moe" in entry.split("-")


def _moe_choice(cap) -> tuple[str | None, str | None, bool]:
    """What the engine's MoE oracle chose (from the Triton MoE entries' not-selected rows), and whether the Triton
    MoE entries launched (then the experts are Triton rows)."""
    triton_moe = any(_is_moe(p.kernel.name) for p in cap.planned)
    for n in cap.not_selected:
        if _is_moe(n.kernel.name):
            return n.elsewhere.runs, f"{n.elsewhere.line} ({n.elsewhere.why})", triton_moe
    return None, None, triton_moe


def answer_path(src, target, model: AttentionConfig, opts, sel, cap, arch: str, columns: dict, rec) -> list:
    """Every compiled call on the path answered; each row written through `rec` as it is answered."""
    runs, line, triton_moe = _moe_choice(cap)
    hidden = model.hidden_size or (model.moe.hidden if model.moe is not None else None)
    router = vllm_router.choose(src, target, model, opts.cache_dir) if src.engine == "vllm" else None
    calls = forward.calls(src.engine, src.label(), model, target, opts.tp, sel.backend if sel else None,
                          sel.line if sel else "", runs, line, triton_moe, hidden,
                          {"decode": opts.batches, "prefill": tuple(b * s for b in opts.batches for s in opts.seq_lens)},
                          router)
    ctx = Context(target, src, cache_root(opts.cache_dir))
    answered = rows.answer_all(calls, ctx, arch, columns, model.name)
    for a in answered:
        rec.write(a.row)
    return answered
