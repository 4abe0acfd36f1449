"""The audit's compiled-kernel pass: after tileprobe.audit.run has captured the Triton launches, the rest of the
model's forward pass (tileprobe.audit.path.forward) is answered kernel by kernel and written as rows beside them.

`check_parallel` runs the engine's own tensor-parallel rules first (tileprobe.audit.path.parallel): a model the
engine refuses at start-up is one line, exit 2, before any kernel is looked at.
"""

from __future__ import annotations

import functools

from tileprobe.audit.path import forward, parallel, rows, vllm_router
from tileprobe.audit.path.call import Context
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.models import AttentionConfig

failures = rows.failures
unanswered = rows.unanswered


def check_parallel(source, model: AttentionConfig, tp: int) -> list[str]:
    inter = model.moe.inter if model.moe is not None else None
    return parallel.check(source, model.heads, model.kv_heads, tp, inter)


def is_moe(entry: str) -> bool:
    return "moe" in entry.split("-")


def _moe_choice(cap) -> tuple[str | None, str | None, bool]:
    """What the engine's MoE oracle chose (from the Triton MoE entries' not-selected rows), and whether the Triton
    MoE entries launched (then the experts are Triton rows)."""
    triton_moe = any(is_moe(p.kernel.name) for p in cap.planned)
    for n in cap.not_selected:
        if is_moe(n.kernel.name):
            return n.elsewhere.runs, f"{n.elsewhere.line} ({n.elsewhere.why})", triton_moe
    return None, None, triton_moe


def moe_choice(cap) -> tuple[str | None, str | None, bool]:
    """What the capture found of the engine's MoE choice (None: not captured yet, the experts' call unknown)."""
    return _moe_choice(cap) if cap is not None else (None, None, False)


def calls(src, target, model: AttentionConfig, tp: int, batches: tuple, seq_lens: tuple, cache_dir, sel,
          moe: tuple[str | None, str | None, bool]) -> list:
    """The compiled calls on the model's path (tileprobe.audit.path.forward), the MoE experts' as `moe` says
    (moe_choice). Plain arguments only: tileprobe.audit.path.ahead runs it in its worker too."""
    runs, line, triton_moe = moe
    hidden = model.hidden_size or (model.moe.hidden if model.moe is not None else None)
    router = vllm_router.choose(src, target, model, cache_dir) if src.engine == "vllm" else None
    return forward.calls(src.engine, src.label(), model, target, tp, sel.backend if sel else None,
                         sel.line if sel else "", runs, line, triton_moe, hidden,
                         {"decode": batches, "prefill": tuple(b * s for b in batches for s in seq_lens)}, router)


def context(src, target, cache_dir) -> Context:
    return Context(target, src, cache_root(cache_dir))


def planner(src, target, model: AttentionConfig, opts, sel, cap=None):
    """A picklable `calls` of this audit (for tileprobe.audit.path.ahead's worker)."""
    return functools.partial(calls, src, target, model, opts.tp, tuple(opts.batches), tuple(opts.seq_lens),
                             opts.cache_dir, sel, moe_choice(cap))


def answer_path(src, target, model: AttentionConfig, opts, sel, cap, arch: str, columns: dict, rec,
                ahead: bool = False) -> list:
    """Every compiled call on the path answered, then each row written through `rec`, in the path's order. `ahead`: a
    worker (tileprobe.audit.path.ahead) is filling the caches, so these are answered from the last call back."""
    answered = rows.answer_all(planner(src, target, model, opts, sel, cap)(), context(src, target, opts.cache_dir),
                               arch, columns, model.name, last_first=ahead)
    for a in answered:
        rec.write(a.row)
    return answered
