"""The report section that answers an engine user's question: "FlashInfer MoE tactics on <target>" — each tactic
of each GEMM, swap and dtype pair, with its verdict, stages, SharedStorage, headroom or overshoot and the reason."""

from __future__ import annotations

from tileprobe.results.resultset import ResultSet, stages_text

GEMM_OF = {"default": "gemm1 (gate_up)", "finalize": "gemm2 (down, finalize)"}


def _short(reason: str | None) -> str:
    r = (reason or "").split(" (cutlass_heuristic.cpp")[0]
    return r.replace("sized: ", "").replace("; not launched", "")[:110]


def tactics_table(rows: list[dict]) -> list[str]:
    out = ["| GEMM | tactic | tile (elements) | swap | dtypes | verdict | stages | SharedStorage (B) | headroom (B) | "
           "evidence | reason |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    order = {"nvfp4xnvfp4": 0, "mxfp8xmxfp4": 1, "fp8xfp8": 2}
    for r in sorted(rows, key=lambda r: (order.get(r.get("dtypes"), 9), r.get("epilogue") != "default",
                                         r.get("tactic") or "", bool(r.get("swap_ab")))):
        head = r.get("headroom_bytes")
        head_s = "–" if head is None else (f"**over by {-head}**" if head < 0 else str(head))
        verdict = r.get("verdict")
        out.append(f"| {GEMM_OF.get(r.get('epilogue'), r.get('epilogue'))} | {r.get('tactic')} | {r.get('tile')} | "
                   f"{'on' if r.get('swap_ab') else 'off'} | {r.get('dtypes')} | "
                   f"{'**' + verdict + '**' if verdict == 'smem-over-limit' else verdict} | {stages_text(r)} | "
                   f"{r.get('smem_bytes') if r.get('smem_bytes') is not None else '–'} | {head_s} | "
                   f"{r.get('evidence')} | {_short(r.get('reason'))} |")
    return out


def tactics_section(rs: ResultSet) -> list[str]:
    rows = [r for r in rs.static if r.get("tactic")]
    if not rows:
        return []
    lines = []
    for target in sorted({r["target"] for r in rows}):
        mine = [r for r in rows if r["target"] == target]
        engines = sorted({r.get("engine") or "?" for r in mine})
        bad = [r for r in mine if r["verdict"] == "smem-over-limit"]
        lines += [f"## FlashInfer MoE tactics on {target} ({', '.join(engines)})", "",
                  f"{len(mine)} tactic variants (GEMM x tactic x swap x dtype pair): "
                  f"{sum(r['verdict'] == 'fits' for r in mine)} fit, {len(bad)} over the "
                  f"{mine[0].get('smem_limit_bytes')} B opt-in limit, "
                  f"{sum(r['verdict'] == 'unsupported' for r in mine)} never dispatched by the engine "
                  f"(its reason in the row). Kernel types are the engine's own (same mangled symbol as flashinfer's "
                  f"generated instantiations).", ""]
        lines += tactics_table(mine) + [""]
    return lines
