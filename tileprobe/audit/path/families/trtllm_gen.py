"""FlashInfer's TRT-LLM-gen kernels: the FMHA / MLA runner (vLLM's FLASHINFER_MLA and TRTLLM_ATTN backends,
FlashInfer's `trtllm-gen` attention backend, SGLang's trtllm_mha / trtllm_mla) and the batched-GEMM runner of the
TRT-LLM-gen fused MoE (vLLM's FLASHINFER_TRTLLM MoE).

Their kernels are prebuilt cubins FlashInfer fetches at first use (flashinfer/artifacts.py: TRTLLM_GEN_FMHA,
TRTLLM_GEN_BMM) or takes from flashinfer-cubin; the wheel holds the host runner that picks one. Which architectures
they serve is written in that runner, and read here from the pinned release (file:line quoted):

- FMHA / MLA: `TllmGenFmhaRunner`'s constructor, include/flashinfer/trtllm/fmha/fmhaRunner.cuh:
  FLASHINFER_CHECK(mSM == kSM_100 || mSM == kSM_103 || mSM == kSM_107, "Unsupported architecture"), the kSM_
  constants resolved from include/flashinfer/trtllm/common.h;
- fused MoE: `isArchCompatible` in csrc/trtllm_batched_gemm_runner.cu (cubin arch -> SM versions it runs on);
  a device no cubin family serves fails with "contains no kernels runnable on sm<N>".

A target whose SM version is not among them is `no-code` (SM120, SM121, SM90 all are). On one that is, the arch
part passes; the kernel and its shared memory are chosen at run time from the downloaded cubin manifest, which is
not in the wheel: gate and bytes are unanswered and say so.

Call params read: none beyond the layer (an MoE layer selects the batched-GEMM runner).
"""

from __future__ import annotations

import re

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered
from tileprobe.audit.path.families import _flashinfer

NAME = "trtllm-gen"
LIBRARY = "FlashInfer TRT-LLM-gen (prebuilt cubins)"

FMHA_RUNNER = "data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh"
COMMON_H = "data/include/flashinfer/trtllm/common.h"
BMM_RUNNER = "data/csrc/trtllm_batched_gemm_runner.cu"

_CHECK = re.compile(r"FLASHINFER_CHECK\(\s*((?:mSM\s*==\s*kSM_\w+\s*(?:\|\|\s*)?)+),\s*\"Unsupported architecture\"",
                    re.S)
_CASE = re.compile(r"case\s+tg::CudaArch::(\w+)\s*:\s*return\s+([^;]+);")


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def fmha_archs(rel: _flashinfer.Release) -> tuple[set[int], str] | str:
    """The SM versions TllmGenFmhaRunner accepts, and where that was read; or why it could not be."""
    try:
        text, common = rel.text(FMHA_RUNNER), rel.text(COMMON_H)
    except Exception as exc:  # noqa: BLE001 - a file missing from the release is an unanswered part
        return f"{rel.label()}: {FMHA_RUNNER} or {COMMON_H} not readable ({exc})"
    m = _CHECK.search(text)
    if not m:
        return f"{rel.label()} {FMHA_RUNNER}: no `FLASHINFER_CHECK(mSM == kSM_... , \"Unsupported architecture\")`"
    names = re.findall(r"kSM_\w+", m.group(1))
    consts, lines = {}, []
    for n in names:
        c = re.search(rf"constexpr\s+int(?:32_t)?\s+{n}\s*=\s*(\d+)\s*;", common)
        if not c:
            return f"{rel.label()} {COMMON_H}: no constant {n}"
        consts[n] = int(c.group(1))
        lines.append(_line(common, c.start()))
    first, last = _line(text, m.start()), _line(text, m.end())
    where = (f"flashinfer/{FMHA_RUNNER}:{first}-{last} FLASHINFER_CHECK({' || '.join(f'mSM == {n}' for n in names)}, "
             f"\"Unsupported architecture\") in TllmGenFmhaRunner's constructor, with "
             f"{', '.join(f'{n}={v}' for n, v in consts.items())} (flashinfer/{COMMON_H}:"
             f"{min(lines)}-{max(lines)})")
    return set(consts.values()), where


def bmm_archs(rel: _flashinfer.Release) -> tuple[set[int], str] | str:
    """The SM versions some TRT-LLM-gen batched-GEMM cubin family runs on (isArchCompatible), and where."""
    try:
        text = rel.text(BMM_RUNNER)
    except Exception as exc:  # noqa: BLE001
        return f"{rel.label()}: {BMM_RUNNER} not readable ({exc})"
    fn = re.search(r"bool\s+isArchCompatible\s*\(.*?\n}\n", text, re.S)
    if not fn:
        return f"{rel.label()} {BMM_RUNNER}: no isArchCompatible(smVersion, cubinArch)"
    body = fn.group(0)
    sms, parts = set(), []
    spans = [(g.start(), g.end(), g.group(1)) for g in re.finditer(r"#ifdef\s+(\w+).*?#endif", body, re.S)]
    for c in _CASE.finditer(body):
        vals = {int(v) for v in re.findall(r"smVersion\s*==\s*(\d+)", c.group(2))}
        guarded = next((n for a, b, n in spans if a <= c.start() < b), None)
        sms |= vals
        parts.append(f"{c.group(1)} -> {sorted(vals)}{f' (only under #ifdef {guarded})' if guarded else ''}")
    if not parts:
        return f"{rel.label()} {BMM_RUNNER}: isArchCompatible has no `case tg::CudaArch::X: return ...`"
    first = _line(text, fn.start())
    where = (f"flashinfer/{BMM_RUNNER}:{first}-{_line(text, fn.end()) - 1} isArchCompatible: {'; '.join(parts)} "
             f"(a device none serves: \"contains no kernels runnable on sm<N>\")")
    return sms, where


def _is_moe(call: KernelCall) -> bool:
    return "moe" in call.layer.lower() or "moe" in call.op.lower() or "expert" in call.layer.lower()


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The three parts; a file of the release that cannot be read as expected is an unanswered row, never a
    traceback."""
    try:
        return _answer(call, ctx)
    except Exception as exc:  # noqa: BLE001 - one row must not stop the audit
        return _flashinfer.failed("TRT-LLM-gen", exc)


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    moe = _is_moe(call)
    kernel = ("TRT-LLM-gen batched GEMM (fused MoE), cubin picked at run time" if moe else
              "TRT-LLM-gen FMHA" + (" (MLA)" if call.param("kv_lora_rank") else "") + ", cubin picked at run time")
    rel = _flashinfer.release(ctx)
    if isinstance(rel, str):
        why = f"FlashInfer not read: {rel}"
        return CompiledAnswer(kernel, unanswered(why), unanswered(why), unanswered(why))
    key = ("trtllm-gen-archs", moe)
    got = ctx.memo.get(key)
    if got is None:
        got = ctx.memo[key] = bmm_archs(rel) if moe else fmha_archs(rel)
    notes = (rel.note,) if rel.note else ()
    if isinstance(got, str):
        return CompiledAnswer(kernel, unanswered(got), unanswered(got), unanswered(got), notes=notes)
    sms, where = got
    sm = ctx.target.cc_int
    runs = sm in sms
    said = f"{rel.label()}: {where}"
    if not runs:
        arch = Part(f"{said}: SM version {sm} ({ctx.target.name}, {ctx.target.arch[:-1]}) is not among "
                    f"{sorted(sms)}, so the runner refuses it: no code for {ctx.target.arch[:-1]}", False, "read")
        why = "no TRT-LLM-gen kernel runs on this architecture"
        return CompiledAnswer(kernel, arch, unanswered(why), unanswered(why), notes=notes)
    arch = Part(f"{said}: SM version {sm} is accepted; the kernels are cubins fetched at first use "
                f"(flashinfer/artifacts.py {'TRTLLM_GEN_BMM' if moe else 'TRTLLM_GEN_FMHA'}) or from "
                "flashinfer-cubin", True, "read")
    why = ("the cubin (and its shared memory) is picked at run time from the downloaded kernel manifest "
           "(flashinferMetaInfo.h, fetched with the cubins), not shipped in the wheel: not read")
    return CompiledAnswer(kernel, arch, unanswered(why), unanswered(why), notes=notes)


__all__ = ["NAME", "LIBRARY", "answer", "fmha_archs", "bmm_archs"]
