"""vLLM's FLASHINFER_MLA_SPARSE_SM120 backend (DeepSeek-V3.2 / GLM-5: MLA with an `index_topk` indexer): FlashInfer's
SM120 sparse-MLA module (flashinfer/mla/_sparse_mla_sm120/, JIT `sparse_mla_sm120`), which vLLM reaches through
`trtllm_batch_decode_with_kv_cache_mla(..., sparse_mla_top_k=...)`. Calls of <= 64 tokens run its decode kernels,
longer ones its prefill kernels.

- arch: the JIT builds the module with `get_nvcc_flags_list(supported_major_versions=[12])` (jit/mla.py): the
  target's -gencode from the release's own CompilationContext._normalize_cuda_arch (run here; _flashinfer.jit_arch);
  cc 9.x / 10.x get no code. vLLM's own `supports_compute_capability` (major == 12) is quoted beside it.
- gate, in order: vLLM's backend checks, quoted with values from the engine wheel (index_topk must be 2048, kernel
  block sizes MultipleOf(64), bf16 only, the kv-cache dtypes it maps to fp8_ds_mla); then FlashInfer's: the
  decode envelope from `supported_sparse_mla_sm120_configs()` (its GPU-less pure-Python query, run here in a
  subprocess from the release's own source, cached) tested with the wheel's own
  `SparseMLASm120DecodeConfig.supports_decode` at the page vLLM hands it (its impl views the cache as 64-row
  pages); the prefill envelope (head counts the C++ dispatcher instantiates, compiled from
  execution/attention_plan.h `has_prefill_heads`; topk % 64 == 0, quoted from csrc attention_resolve.cu).
- bytes: compiled from the release's headers: the decode kernel's `Dsv32DecodeSmem<MT>::LAUNCH_BYTES` plus its
  static `sm_p_full[HPB][DSV32_BI]` bf16; prefill: the SG / MG / swapAB layouts' TOTAL (each static_asserted
  <= 101376 by FlashInfer itself), the largest for the heads' variants.

Call params: heads (per rank), topk (index_topk), page_size (vLLM's block size; default: the backend's own
MultipleOf(64) -> 64), kv_lora_rank, qk_rope_head_dim, kv_cache_dtype, dtype; optional model_type (an hf model_type
starting with "glm" selects the glm_nsa family, as vLLM's kv_scale_format does) and num_tokens.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tileprobe.audit.path.call import CompiledAnswer, Context, KernelCall, Part, unanswered
from tileprobe.audit.path.families import _flashinfer
from tileprobe.backends.cutlass.content_hash import folder_hash
from tileprobe.errors import UsageError

NAME = "flashinfer-sparse-mla-sm120"
LIBRARY = "FlashInfer SM120 sparse MLA (JIT)"

API = "mla/_sparse_mla_sm120/_api.py"
JIT_MLA = "jit/mla.py"
RESOLVE = "data/csrc/sparse_mla_sm120/attention_resolve.cu"
DECODE_CUH = "data/include/flashinfer/attention/sparse_mla_sm120/kernels/dsv32_fp8/decode.cuh"
VLLM_BACKEND = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py"
VLLM_IMPL = "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm120.py"
FAMILY_ENUM = {"dsv3_2": "DSV3_2", "glm_nsa": "GLM_NSA", "glm53_nope": "GLM53_NOPE"}

# The config query, run in a child Python against the release's own source: `flashinfer` and `flashinfer.mla` are
# bare namespace stand-ins so their package __init__ (which imports every family) is not run.
_QUERY = r"""
import dataclasses, importlib, json, sys, types
root = sys.argv[1]
for name, sub in (("flashinfer", ""), ("flashinfer.mla", "/mla")):
    m = types.ModuleType(name); m.__path__ = [root + sub]; sys.modules[name] = m
api = importlib.import_module("flashinfer.mla._sparse_mla_sm120._api")
out = {}
for fam, cfg in api.supported_sparse_mla_sm120_configs().items():
    d = dataclasses.asdict(cfg)
    out[fam] = {k: sorted(v) if isinstance(v, (set, frozenset)) else v for k, v in d.items()}
print("TILEPROBE-CONFIGS " + json.dumps(out))
"""


# ---- FlashInfer's config query, run -------------------------------------------------------------------------------

def configs(rel: _flashinfer.Release, ctx: Context) -> tuple[dict, str] | str:
    """supported_sparse_mla_sm120_configs() of the release: {family: fields}, and how it was had; or why not."""
    memo = ctx.memo.get(("sparse-mla-configs", rel.version))
    if memo is not None:
        return memo
    ctx.memo[("sparse-mla-configs", rel.version)] = out = _configs(rel, ctx)
    return out


def _configs(rel: _flashinfer.Release, ctx: Context) -> tuple[dict, str] | str:
    pkg_dir = rel.root / "mla" / "_sparse_mla_sm120"
    if not pkg_dir.is_dir():
        return f"{rel.label()} has no flashinfer/mla/_sparse_mla_sm120/ (the SM120 sparse-MLA module)"
    key = hashlib.sha256(f"{rel.version}\0{folder_hash(pkg_dir)}".encode()).hexdigest()[:20]
    hit = Path(ctx.cache_dir) / "flashinfer-sizes" / f"sparse-mla-configs-{key}.json"
    line = rel.line_of(API, r"^def supported_sparse_mla_sm120_configs")
    where = f"flashinfer/{API}:{line[0] if line else '?'} supported_sparse_mla_sm120_configs()"
    if hit.is_file():
        try:
            return json.loads(hit.read_text()), f"{where}, run here (cached)"
        except (OSError, ValueError):
            pass
    try:
        p = subprocess.run([sys.executable, "-c", _QUERY, str(rel.root)], capture_output=True, text=True,
                           timeout=300, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{where} could not be run here ({type(exc).__name__})"
    got = next((ln[len("TILEPROBE-CONFIGS "):] for ln in p.stdout.splitlines() if ln.startswith("TILEPROBE-CONFIGS ")),
               None)
    if p.returncode != 0 or got is None:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1][:200]
        return f"{where} could not be imported by {sys.executable} ({last}; it needs torch)"
    data = json.loads(got)
    hit.parent.mkdir(parents=True, exist_ok=True)
    tmp = hit.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True))
    os.replace(tmp, hit)
    return data, f"{where}, run here"


def config_class(rel: _flashinfer.Release):
    """The release's own SparseMLASm120DecodeConfig dataclass (its source, executed here: pure Python)."""
    text = rel.text(API)
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SparseMLASm120DecodeConfig")
    decos = "".join(f"@{ast.get_source_segment(text, d)}\n" for d in cls.decorator_list)
    code = ("from __future__ import annotations\nfrom dataclasses import dataclass, field\n"
            "from typing import Optional\n" + decos + ast.get_source_segment(text, cls))
    ns: dict = {}
    exec(compile(code, f"flashinfer/{API}", "exec"), ns)  # noqa: S102 - the release's own dataclass
    return ns["SparseMLASm120DecodeConfig"], cls.lineno


def decode_config(rel: _flashinfer.Release, fields: dict):
    cls, _ = config_class(rel)
    kw = {k: (frozenset(v) if isinstance(v, list) else v) for k, v in fields.items()}
    return cls(**kw)


# ---- the engine's checks, quoted ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class EngineRule:
    ok: bool
    text: str


def _src_line(src, rel: str, pattern: str, after: str | None = None) -> tuple[int, str] | None:
    lines = src.read_text(rel).splitlines()
    start = 0
    if after:
        start = next((i for i, ln in enumerate(lines) if re.search(after, ln)), 0)
    for i in range(start, len(lines)):
        if re.search(pattern, lines[i]):
            return i + 1, lines[i].strip()
    return None


def vllm_rules(call: KernelCall, ctx: Context) -> tuple[list[EngineRule], int] | str:
    """vLLM's FLASHINFER_MLA_SPARSE_SM120 checks for this call, each quoted with its values; and the page size
    vLLM hands FlashInfer."""
    src = ctx.engine_source
    cls = r"class FlashInferMLASparseSM120Backend"
    try:
        topk_l = _src_line(src, VLLM_BACKEND, r"int\(index_topk\)\s*!=\s*\d+", cls)
        block_l = _src_line(src, VLLM_BACKEND, r"return \[MultipleOf\(\d+\)\]", cls)
        dtype_l = _src_line(src, VLLM_BACKEND, r"supported_dtypes.*=\s*\[", cls)
        cc_l = _src_line(src, VLLM_BACKEND, r"capability\.major\s*==\s*\d+", cls)
        kv_l = _src_line(src, VLLM_BACKEND, r"if kv_cache_dtype not in \(", cls)
        page_l = _src_line(src, VLLM_IMPL, r"\.view\(-1,\s*\d+,")
    except UsageError as exc:
        return str(exc).splitlines()[0]
    if not all((topk_l, block_l, dtype_l, cc_l, kv_l, page_l)):
        return f"structure not recognized in {src.label()} {VLLM_BACKEND} / {VLLM_IMPL} (FLASHINFER_MLA_SPARSE_SM120)"
    eng = src.label()
    need_topk = int(re.search(r"!=\s*(\d+)", topk_l[1]).group(1))
    mult = int(re.search(r"MultipleOf\((\d+)\)", block_l[1]).group(1))
    major = int(re.search(r"==\s*(\d+)", cc_l[1]).group(1))
    fi_page = int(re.search(r"view\(-1,\s*(\d+),", page_l[1]).group(1))
    kv_text = src.read_text(VLLM_BACKEND).splitlines()[kv_l[0] - 1: kv_l[0] + 8]
    kv_ok = re.findall(r"\"(\w+)\"", " ".join(kv_text).split(")")[0])
    topk, page = call.param("topk"), call.param("page_size") or mult
    kvd = str(call.param("kv_cache_dtype", "auto"))
    dtype = str(call.param("dtype", "bf16"))
    rules = [
        EngineRule(ctx.target.cc_int // 10 == major,
                   f"{eng} {VLLM_BACKEND}:{cc_l[0]} `{cc_l[1]}`: cc {ctx.target.cc}"),
        EngineRule(topk is not None and int(topk) == need_topk,
                   f"{eng} {VLLM_BACKEND}:{topk_l[0]} `{topk_l[1]}` -> \"FLASHINFER_MLA_SPARSE_SM120 requires "
                   f"index_topk={need_topk}; got {topk}\"" if topk != need_topk else
                   f"{eng} {VLLM_BACKEND}:{topk_l[0]}: index_topk={topk} == {need_topk}"),
        EngineRule(int(page) % mult == 0,
                   f"{eng} {VLLM_BACKEND}:{block_l[0]} `{block_l[1]}`: block size {page}"
                   + ("" if int(page) % mult == 0 else f" is not a multiple of {mult}")),
        EngineRule(dtype in ("bf16", "bfloat16"), f"{eng} {VLLM_BACKEND}:{dtype_l[0]} `{dtype_l[1]}`: dtype {dtype}"),
        EngineRule(kvd in kv_ok, f"{eng} {VLLM_BACKEND}:{kv_l[0]}: kv_cache_dtype {kvd!r} in {kv_ok}"),
    ]
    rules.append(EngineRule(True, f"{eng} {VLLM_IMPL}:{page_l[0]} `{page_l[1]}`: FlashInfer is handed "
                                  f"{fi_page}-row pages"))
    return rules, fi_page


# ---- FlashInfer's compiled numbers --------------------------------------------------------------------------------

PREFILL_LAUNCH = "data/include/flashinfer/attention/sparse_mla_sm120/execution/prefill_launch.cuh"


def _sg_schedule(rel: _flashinfer.Release) -> str:
    """The GatherSchedule launch_prefill_sg defaults to (what dispatch_v32_sg launches)."""
    m = re.search(r"typename GatherSchedule\s*=\s*(.+?)>\s*PrefillLaunchResult\s+launch_prefill_sg",
                  rel.text(PREFILL_LAUNCH), re.S)
    return m.group(1).strip() if m else "void"


def _sizes_source(enum: str, schedule: str) -> str:
    return _flashinfer.host_only(f"""
#include <flashinfer/attention/sparse_mla_sm120/execution/prefill_launch.cuh>
#include <flashinfer/attention/sparse_mla_sm120/kernels/dsv32_fp8/decode.cuh>
using namespace flashinfer::sparse_mla_sm120;
int main() {{
  constexpr ModelType MT = ModelType::{enum};
  printf("decode_dynamic %zu\\n", (size_t)Dsv32DecodeSmem<MT>::LAUNCH_BYTES);
  printf("decode_static %zu\\n", sizeof(bf16) * HPB * DSV32_BI);
  printf("prefill_1 %zu\\n", (size_t)Fp8PrefillResources<MT, QkComputeMode::FP8, {schedule}>::SHARED_BYTES);
  printf("prefill_2 %zu\\n", (size_t)SmemLayoutMG<MT, QkComputeMode::FP8>::TOTAL);
  printf("prefill_4 %zu\\n", (size_t)SmemLayoutSwapAB<MT>::TOTAL);
  for (int v : {{1, 2, 4}}) {{
    printf("heads_%d", v);
    for (int h = 1; h <= 128; ++h) if (execution::has_prefill_heads(MT, v, h)) printf(" %d", h);
    printf("\\n");
  }}
}}
""")


VARIANTS = {"1": "SG", "2": "MG", "4": "swapAB"}


def sizes(rel: _flashinfer.Release, ctx: Context, family: str) -> tuple[dict | None, str]:
    enum = FAMILY_ENUM.get(family)
    if enum is None:
        return None, f"family {family} is not sized here"
    if enum == "GLM53_NOPE":
        return None, "the GLM-5.3 NoPE family's kernels are not sized here"
    return _flashinfer.compile_numbers(rel, ctx, f"sparse-mla-{family}", _sizes_source(enum, _sg_schedule(rel)))


# ---- the answer ---------------------------------------------------------------------------------------------------

def _family(call: KernelCall) -> tuple[str | None, str]:
    rank, rope = call.param("kv_lora_rank"), call.param("qk_rope_head_dim")
    glm = str(call.param("model_type") or "").startswith("glm")
    if rank == 512 and rope == 64:
        return ("glm_nsa" if glm else "dsv3_2"), f"d_qk={rank + rope}"
    if rank == 512 and rope == 0 and glm:
        return "glm53_nope", "d_qk=512 (NoPE)"
    return None, f"kv_lora_rank={rank}, qk_rope_head_dim={rope}"


def _phases(call: KernelCall) -> list[str]:
    return ["prefill", "decode"] if call.phase == "prefill+decode" else [call.phase]


def answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    """The three parts; a file of the release that cannot be read as expected is an unanswered row, never a
    traceback."""
    try:
        return _answer(call, ctx)
    except Exception as exc:  # noqa: BLE001 - one row must not stop the audit
        return _flashinfer.failed(f"sparse_mla_sm120 (heads={call.param('heads')}, topk={call.param('topk')})", exc)


def _answer(call: KernelCall, ctx: Context) -> CompiledAnswer:
    heads, topk = call.param("heads"), call.param("topk")
    kernel = f"sparse_mla_sm120 (heads={heads}, topk={topk})"
    rel = _flashinfer.release(ctx)
    if isinstance(rel, str):
        why = f"FlashInfer not read: {rel}"
        return CompiledAnswer(kernel, unanswered(why), unanswered(why), unanswered(why))
    notes = [rel.note] if rel.note else []
    if not (rel.root / "mla" / "_sparse_mla_sm120").is_dir():
        why = f"{rel.label()} has no flashinfer/mla/_sparse_mla_sm120/ (added in a later release)"
        return CompiledAnswer(kernel, Part(why, False, "read"), unanswered(why), unanswered(why), notes=tuple(notes))
    majors_l = rel.line_of(JIT_MLA, r"supported_major_versions=\[", _def_line(rel, "gen_sparse_mla_sm120_module"))
    majors = [int(x) for x in re.findall(r"\d+", majors_l[1])] if majors_l else None
    ja = _flashinfer.jit_arch(rel, ctx.target.cc, majors,
                              f"flashinfer/{JIT_MLA}:{majors_l[0]} `{majors_l[1]}`" if majors_l else JIT_MLA)
    arch = Part(ja.answer, ja.ok, "read" if ja.ok is not None else "none")
    family = _family(call)[0]
    with ThreadPoolExecutor(max_workers=1) as pool:  # nvcc builds the layouts while the config query runs
        sized = pool.submit(sizes, rel, ctx, family) if family in FAMILY_ENUM else None
        gate, family = _gate(call, ctx, rel, notes)
        if sized is not None:
            sized.result()
    bytes_part, smem = _bytes(call, ctx, rel, family)
    kernel = f"sparse_mla_sm120 {family or '?'} (heads={heads}, topk={topk})"
    notes.append(_flashinfer.prebuilt_note(rel))
    return CompiledAnswer(kernel, arch, gate, bytes_part, smem_bytes=smem, notes=tuple(notes))


def _def_line(rel: _flashinfer.Release, fn: str) -> int:
    hit = rel.line_of(JIT_MLA, rf"^def {fn}\(")
    return hit[0] - 1 if hit else 0


def _gate(call: KernelCall, ctx: Context, rel: _flashinfer.Release, notes: list[str]) -> tuple[Part, str | None]:
    heads, topk = int(call.param("heads") or 0), int(call.param("topk") or 0)
    family, dims = _family(call)
    _explain(call, ctx, rel, notes)
    said = []
    fi_page = int(call.param("page_size") or 64)
    if getattr(ctx.engine_source, "engine", "") == "vllm":
        rules = vllm_rules(call, ctx)
        if isinstance(rules, str):
            return unanswered(rules), family
        rules, fi_page = rules
        bad = [r for r in rules if not r.ok]
        if bad:
            return Part("; ".join(r.text for r in bad), False, "quoted"), family
        said.append(f"vLLM's FLASHINFER_MLA_SPARSE_SM120 checks pass ({rules[1].text}; {rules[-1].text})")
    else:
        said.append(f"{ctx.engine_source.label()}: this backend is vLLM's; the engine's own checks are not read")
    if family is None:
        line = rel.line_of("mla/_core.py", r"SM120 sparse MLA expects either the v32/GLM_NSA")
        where = f"flashinfer/mla/_core.py:{line[0]}" if line else "flashinfer/mla/_core.py"
        return Part(f"{where}: SM120 sparse MLA expects the v32/GLM_NSA 512+64 layout or GLM-5.3 NoPE 512+0; "
                    f"got {dims}", False, "quoted"), None
    got = configs(rel, ctx)
    if isinstance(got, str):
        return unanswered(got), family
    data, how = got
    cfg = decode_config(rel, data[family])
    accept = "run"
    for ph in _phases(call):
        if ph == "decode":
            ok = cfg.supports_decode(heads, topk, num_tokens=int(call.param("num_tokens") or 1),
                                     page_block_size=fi_page)
            text = (f"{how}: configs[{family!r}].supports_decode(num_heads={heads}, topk={topk}, "
                    f"page_block_size={fi_page}) "
                    f"= {ok} (decode envelope: heads 1..{cfg.max_num_heads}"
                    f"{'' if cfg.head_counts is None else ' in ' + str(sorted(cfg.head_counts))}, topk >= "
                    f"{cfg.min_topk}{' (runtime)' if cfg.topk_is_runtime else ' in ' + str(sorted(cfg.topks))}, "
                    f"page {'any > 0 (runtime)' if cfg.page_block_size_is_runtime else cfg.page_block_size}, "
                    f"<= {cfg.max_num_tokens} tokens)")
            evidence = "run"
        else:
            ok, text, evidence = _prefill_gate(rel, ctx, family, heads, topk)
            accept = evidence if call.phase == "prefill" else accept
        if not ok:
            return Part(("SM120 sparse-MLA has no decode kernel for this shape: " if ph == "decode" else "")
                        + text, False, evidence), family
        said.append(text)
    return Part("; ".join(said), True, accept), family


def _prefill_gate(rel: _flashinfer.Release, ctx: Context, family: str, heads: int,
                  topk: int) -> tuple[bool, str, str]:
    nums, how = sizes(rel, ctx, family)
    resolve = rel.line_of(RESOLVE, r"m\.topk % 64 == 0")
    rq = f"flashinfer/{RESOLVE}:{resolve[0]}" if resolve else f"flashinfer/{RESOLVE}"
    if topk % 64:
        return False, f"{rq}: prefill needs topk % 64 == 0 (whole 64-wide index tiles); topk={topk}", "quoted"
    if not nums or "__error__" in nums:
        return True, f"{rq}: topk % 64 == 0; prefill head counts not compiled ({how})", "quoted"
    by_variant = {v: [int(h) for h in nums.get(f"heads_{v}", "").split()] for v in VARIANTS}
    fits = [VARIANTS[v] for v, hs in by_variant.items() if heads in hs]
    table = ", ".join(f"{VARIANTS[v]} {hs}" for v, hs in by_variant.items())
    where = "execution/attention_plan.h has_prefill_heads, compiled"
    if not fits:
        return (False, f"no prefill kernel for num_heads={heads} ({where}: {table}): \"unsupported sparse-MLA "
                       "prefill heads\"", "compiled")
    return (True, f"prefill: num_heads={heads} served by {'/'.join(fits)} ({where}: {table}); {rq}: topk % 64 == 0",
            "compiled")


def _explain(call: KernelCall, ctx: Context, rel: _flashinfer.Release, notes: list[str]) -> None:
    """The public reports this shape matches, where they failed, and what this release's own query says of it."""
    heads, topk, page = int(call.param("heads") or 0), int(call.param("topk") or 0), call.param("page_size")
    if topk != 1152 and page != 32:
        return
    note = ("vllm#56837 (num_heads=64, topk=1152; FlashInfer 0.6.18.post1) and flashinfer#5323 (page_block_size=32) "
            "came from DeepSeek-V4.1's own vLLM path (vllm/models/deepseek_v41, FlashInfer's dsv4 decode family) on "
            "0.6.x releases whose SM120 decode kernels were instantiated for fixed (heads, topk) pairs at 64-row "
            "pages; in this backend (DeepSeek-V3.2 / GLM-5) vLLM itself refuses index_topk != 2048 and block sizes "
            "that are not multiples of 64")
    got = configs(rel, ctx)
    if not isinstance(got, str):
        says = []
        for fam in ("dsv4", "dsv3_2"):
            if fam in got[0]:
                ok = decode_config(rel, got[0][fam]).supports_decode(heads or 64, topk, page_block_size=int(page or 64))
                says.append(f"{fam}: {ok}")
        note += (f"; {rel.label()}'s own supported_sparse_mla_sm120_configs() (run here) for num_heads={heads or 64}, "
                 f"topk={topk}, page_block_size={page or 64}: {', '.join(says)}")
    notes.append(note)


def _bytes(call: KernelCall, ctx: Context, rel: _flashinfer.Release, family: str | None) -> tuple[Part, int | None]:
    if family is None:
        return unanswered("no FlashInfer kernel family for these MLA dims"), None
    nums, how = sizes(rel, ctx, family)
    if not nums or "__error__" in nums:
        return unanswered(f"the kernels' shared-memory layouts were not compiled ({how})"), None
    heads = int(call.param("heads") or 0)
    decl = rel.line_of(DECODE_CUH, r"__shared__ bf16 sm_p_full")
    parts, worst = [], 0
    accept = "run"
    for ph in _phases(call):
        if ph == "decode":
            dyn, st = int(nums["decode_dynamic"]), int(nums["decode_static"])
            total = dyn + st
            parts.append(f"decode: Dsv32DecodeSmem<{FAMILY_ENUM[family]}>::LAUNCH_BYTES {dyn} B dynamic + {st} B "
                         f"static (flashinfer/{DECODE_CUH}:{decl[0] if decl else '?'} sm_p_full) = {total} B")
        else:
            hs = {v: [int(h) for h in nums.get(f"heads_{v}", "").split()] for v in VARIANTS}
            used = [v for v in VARIANTS if heads in hs[v]] or list(VARIANTS)
            vals = {VARIANTS[v]: int(nums[f"prefill_{v}"]) for v in used}
            total = max(vals.values())
            parts.append("prefill: " + ", ".join(f"{k} {b} B" for k, b in vals.items())
                         + f" (the planner picks one; largest {total} B)")
        worst = max(worst, total)
    ok = worst <= ctx.target.smem_optin
    return Part(f"{'; '.join(parts)}; {how} from {rel.label()}'s headers", ok, "compiled"), worst


__all__ = ["NAME", "LIBRARY", "answer", "configs", "decode_config", "vllm_rules"]
