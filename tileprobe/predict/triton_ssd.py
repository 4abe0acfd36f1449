"""Predict the shared bytes of vLLM's Mamba-2 SSD Triton kernels (vllm/model_executor/layers/mamba/ops/ssd_*.py)
without compiling, where the rules below were checked exact against Triton's own metadata.shared; CannotPredict
everywhere else.

Keyed by (Triton release, sha256 of the engine file that defines the kernel): CHECKED lists the pairs the rules were
checked on. Another release or a changed file is CannotPredict, saying so: the pipeliner, the MMA lowering, the
layout passes and the allocator all change between releases, and the rules read the kernels' text.

Scope: Triton 3.8.0; the pin table's vLLM (by sha256); sm_120 / sm_121 (mma.sync: a pipelined tile keeps num_stages - 1
buffers); power-of-two blocks 16..256 and num_warps 2, 4, 8; num_stages 2..5 for the kernels with tl.dot; activations
(x, B, C) bf16 or fp16, dt / dA_cumsum / CB fp32, chunk states fp32 (Nemotron-H's SSM cache dtype), or for
_chunk_scan also bf16 / fp16 (the model's dtype: Falcon-H1's). metadata.shared is what
TritonGPU's AllocateSharedMemory pass lays out: buffers live together add, buffers live at different times share space
(the largest phase counts). Sizes: e = the activations' element size (2 B), f = 4 B (fp32).

1. _state_passing_fwd_kernel: 0 B. One-dimensional loads, fp32 arithmetic and stores in one blocked layout: no
   tl.dot, no reduction, no layout conversion, so nothing is placed in shared memory (any BLOCK_SIZE, warps,
   stages, HAS_INITSTATES).
2. _bmm_chunk_fwd_kernel (C = a @ b^T over K = dstate): the K loop's two tl.dot operands, a (BM x BK) and b (BK x BN),
   each (num_stages - 1) buffers of e bytes an element: (S - 1) * (BM*BK + BK*BN) * e. The loop's trip count is the
   constexpr cdiv(K, BK); when it is 1 the loop is not pipelined and each operand takes one buffer.
3. _chunk_state_fwd_kernel (states = x @ (b * scale) over the chunk): per stage, x (BM x BK, e), b (BK x BN, e) and
   the two fp32 vectors dA_cumsum and dt (BK each) are pipelined: (S - 1) * (BM*BK*e + BK*BN*e + 2*BK*f). b is
   scaled in registers, so it reaches the MMA through one more conversion buffer: BK*BN*e; except where BK >= 32 *
   num_warps, where Triton converts the fp32 scale vector (BK*f) instead and b is read from its pipelined buffer.
4. _chunk_scan_fwd_kernel (dstate <= 128: one tl.dot for the previous state, then the causal K loop over the chunk):
   the larger of two phases that are never live together:
   - the state dot: C (BM x DS, e) and the previous state (DS x BN) as the dot's operands, one buffer each (not in a
     loop); the state is converted to C's dtype after its layout conversion when it is loaded from fp32 initial
     states (HAS_INITSTATES: DS*BN*s, s the chunk states' element size, 4 B fp32 or 2 B bf16 / fp16), before it
     when the kernel may substitute zeros (DS*BN*e). DS = BLOCK_SIZE_DSTATE.
   - the K loop: (S - 1) * (BM*BK*f [CB, fp32] + BK*BN*e [x] + 2*BK*f [dA_cumsum, dt]) pipelined, plus BM*BK*e: CB,
     scaled in registers and cast to x's dtype, reaches the MMA through a conversion buffer.
   At num_stages 1 nothing in the K loop is pipelined: its buffers (CB's conversion BM*BK*e, x's one BK*BN*e) are
   no larger than the state dot's while BK <= DS, so the state dot's bytes are the answer (checked on 36 random
   launches and the captured ones); BK > DS at num_stages 1 is CannotPredict.
5. The epilogue (all three dot kernels): the fp32 accumulator is converted to the store's layout after the loop's
   buffers die, so its scratch shares their space and the loop's bytes are the answer wherever the scratch cannot be
   larger. The scratch is never larger than the output tile (BM*BN times the output's element size); for
   _bmm_chunk's and _chunk_state's fp32 outputs it was also never larger than 16384 B with 2 warps and 32768 B with
   4 or 8 (EPILOGUE_BOUND: the largest measured over every BM, BN in 16..256 with the smallest loop, BK 16, where
   the conversion is the larger allocation). Where that bound exceeds the loop's bytes: CannotPredict.

6. _chunk_cumsum_fwd_kernel (no tl.dot): dt is loaded as a BLOCK_SIZE_H x BLOCK_SIZE_CHUNK tile whose contiguous
   axis is the heads (v = min(16 B / dt's element size, BLOCK_SIZE_H) heads a thread), while tl.cumsum along the
   chunk and the two fp32 stores (dt_out, dA_cumsum: chunk contiguous) use the chunk-contiguous layout. The fp32
   tile is converted between them through shared memory in rounds of BLOCK_SIZE_H x min(BLOCK_SIZE_CHUNK,
   128 * num_warps / v) values: BH * min(BC, 128 * W / v) * f. The scan's cross-warp scratch is smaller and not
   live at the same time. Checked for BLOCK_SIZE_H 2..64, BLOCK_SIZE_CHUNK 32..256, 4 or 8 warps, nheads >=
   BLOCK_SIZE_H, bf16 / fp16 / fp32 dt, with and without dt_bias and softplus, where every thread holds at least one
   whole vector (BH * BC >= 32 * W * v); elsewhere (a 1-head tile, 1 or 2 warps with 64 heads) it measured
   otherwise.

CannotPredict, because measurements found the rules wrong there or nothing checked them:
- a tl.dot operand tile under 4 B per thread (BLOCK*BK*e < 4 * 32 * num_warps): not pipelined, and whether its
  one copy shares space with the other buffers was not modelled;
- num_stages 1 for _bmm_chunk / _chunk_state (nothing pipelined: measured different, not modelled);
- an epilogue whose rule-5 bound exceeds the loop's bytes: its layout conversion may then be the larger allocation
  (measured: _chunk_state 64x32x16 with 4 warps is the whole fp32 tile, 8192 B; _bmm_chunk 128x256 with 4 warps is
  an eighth of it, 16384 B), and its size is not modelled;
- _chunk_scan with dstate > 128 (a second K loop), HAS_Z, IS_CAUSAL False, or other dtypes;
- any other capability (sm_90 / sm_100 use wgmma / tcgen05, which keep num_stages buffers and more), Triton release
  or engine file.

Checked: every launch `tileprobe audit --engine vllm --model nemotron-h-8b --target rtx-pro-6000` captures (116
distinct: all answered, and `--verify 40` compiled 40 of them: 0 differ); for 16-bit chunk states, the 46
_chunk_scan launches a Falcon-H1 config captures (its fields: tests/test_model_configs.py; bf16 states and initial
states) and 100 random launches around them (the states drawn bf16 / fp16 / fp32, with and without initial states;
sm_120 58, sm_121 42) against the same allocation pass: 0 differ; and several hundred random launches around
them (blocks, warps, stages, dtypes, HAS_INITSTATES, head dim 32..128, state size 16..128, chunk size 64..256,
sm_120 and sm_121) against Triton 3.8.0's own passes up to AllocateSharedMemory; tests/predict/test_triton_ssd.py
draws new ones every run (one of them compiled in full).
"""

from __future__ import annotations

from tileprobe.engines import pins
from tileprobe.predict import recheck
from tileprobe.predict._common import CannotPredict, cc_checked, source_checked

VLLM = pins.label("vllm")  # the engine releases whose kernels the tables below were checked on

FAMILY = "triton-ssd"
# (Triton release, sha256 of the engine file defining the kernel) -> the engine release whose file that is
CHECKED = {
    ("3.8.0", "4d0d7dcd63dea72c6a805c0c64a1282edde66c6374a4ccad27a9070bf956b163"): f"{VLLM} ssd_bmm.py",
    ("3.8.0", "a9acbf4cf8efd5d698edd39ca7a43e451938e3221e142ba13dd19ba691dd729f"): f"{VLLM} ssd_chunk_scan.py",
    ("3.8.0", "3e789542ad54e65c8d7215078964dd9607cf56f97260e6f83f79f9cdf34b60f9"): f"{VLLM} ssd_chunk_state.py",
    ("3.8.0", "62388cb710fac94351129ac14e177e6c22305721ade8540bbc24a9dacc7b859e"): f"{VLLM} ssd_state_passing.py",
}
TRITON_VERSIONS = tuple(dict.fromkeys(v for v, _ in CHECKED))
CCS = (120, 121)
KERNELS = ("_state_passing_fwd_kernel", "_bmm_chunk_fwd_kernel", "_chunk_state_fwd_kernel", "_chunk_scan_fwd_kernel",
           "_chunk_cumsum_fwd_kernel")
BLOCKS = (16, 32, 64, 128, 256)
WARPS = (2, 4, 8)
STAGES = (2, 3, 4, 5)
ACTIVATIONS = {"bf16": 2, "fp16": 2}
F32 = 4
# rule 5: the largest fp32 epilogue conversion measured per num_warps, over every BM, BN in BLOCKS
EPILOGUE_BOUND = {2: 16384, 4: 32768, 8: 32768}
CUMSUM_H = (2, 4, 8, 16, 32, 64)  # the autotune list of the pin table's vLLM (and 2..64 checked)
CUMSUM_CHUNK = (32, 64, 128, 256)
CUMSUM_WARPS = (4, 8)


def _check_scope(kernel: str, triton_version: str, source_sha256: str, cc: int) -> None:
    # the table's own releases, or one whose reviewed recheck file lists this rule 0-differ (tileprobe.predict.recheck)
    if recheck.lookup("triton-ssd", CHECKED, TRITON_VERSIONS, triton_version, kernel, (source_sha256,)) is None:
        raise source_checked("triton-ssd", kernel, source_sha256, VLLM)
    if kernel not in KERNELS:
        raise CannotPredict(f"{kernel}: no stated triton-ssd rule (see tileprobe.predict.triton_ssd); size it")
    cc_checked("triton-ssd", CCS, cc, " (wgmma / tcgen05 keep other buffers)")


def _dot_scope(p: dict, blocks: tuple[str, ...], stages: tuple[int, ...] = STAGES) -> None:
    odd = [f"{k}={p[k]}" for k in blocks if p[k] not in BLOCKS]
    if odd:
        raise CannotPredict(f"{', '.join(odd)}: the rules were checked for blocks {BLOCKS}; size it")
    if p["num_warps"] not in WARPS:
        raise CannotPredict(f"num_warps {p['num_warps']}: checked for {WARPS}; size it")
    if p["num_stages"] not in stages:
        raise CannotPredict(f"num_stages {p['num_stages']}: checked for {stages} (at 1 nothing is pipelined, not "
                            "modelled); size it")
    bad = [k for k, v in p.items() if k.endswith("_dtype") and v is not None and v not in ACTIVATIONS and v != "fp32"]
    if bad:
        raise CannotPredict(f"{', '.join(f'{k} {p[k]}' for k in bad)}: not a dtype the rules were checked on; size it")


def _thin(name: str, elems: int, elem: int, warps: int) -> None:
    """Rule scope: a pipelined dot operand needs at least 4 B per thread (cp.async)."""
    if elems * elem < 4 * 32 * warps:
        raise CannotPredict(f"the {name} tile ({elems} elements, {warps} warps) is under 4 B per thread: not "
                            "pipelined, and whether its copy shares space is not modelled; size it")


def _epilogue(loop: int, bm: int, bn: int, out_size: int, warps: int, what: str, measured: bool = False) -> int:
    """Rule 5: the loop's bytes, where the epilogue's conversion of the output tile cannot outgrow them (`measured`:
    the kernel's fp32 epilogue whose conversion was measured over the whole block scope)."""
    tile = bm * bn * out_size
    bound = min(tile, EPILOGUE_BOUND[warps]) if measured and out_size == F32 else tile
    if bound > loop:
        raise CannotPredict(f"the {bm}x{bn} {what} output tile's layout conversion (up to {bound} B) may outgrow the "
                            f"loop's {loop} B, and its own size is not modelled; size it")
    return loop


def bmm(p: dict) -> int:
    """Rule 2 (_bmm_chunk_fwd_kernel)."""
    _dot_scope(p, ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"))
    bm, bn, bk, w, s = (p[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages"))
    if p["a_dtype"] not in ACTIVATIONS or p["a_dtype"] != p["b_dtype"] or p["dot_dtype"] != p["a_dtype"]:
        raise CannotPredict(f"a {p['a_dtype']}, b {p['b_dtype']}, dot {p['dot_dtype']}: checked for bf16 / fp16 "
                            "operands of the dot's own dtype; size it")
    e = ACTIVATIONS[p["a_dtype"]]
    for name, elems in (("a", bm * bk), ("b", bk * bn)):
        _thin(name, elems, e, w)
    buffers = s - 1 if -(-p["K"] // bk) > 1 else 1
    return _epilogue(buffers * (bm * bk + bk * bn) * e, bm, bn, p["out_size"], w, "CB", measured=True)


def chunk_state(p: dict) -> int:
    """Rule 3 (_chunk_state_fwd_kernel)."""
    _dot_scope(p, ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K"))
    bm, bn, bk, w, s = (p[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps", "num_stages"))
    if p["x_dtype"] not in ACTIVATIONS or p["b_dtype"] != p["x_dtype"]:
        raise CannotPredict(f"x {p['x_dtype']}, B {p['b_dtype']}: checked for bf16 / fp16 of one dtype; size it")
    e = ACTIVATIONS[p["x_dtype"]]
    for name, elems in (("x", bm * bk), ("B", bk * bn)):
        _thin(name, elems, e, w)
    convert = bk * F32 if bk >= 32 * w else bk * bn * e
    loop = (s - 1) * (bm * bk * e + bk * bn * e + 2 * bk * F32) + convert
    return _epilogue(loop, bm, bn, p["out_size"], w, "states", measured=True)


def chunk_scan(p: dict) -> int:
    """Rule 4 (_chunk_scan_fwd_kernel)."""
    _dot_scope(p, ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "BLOCK_SIZE_DSTATE"), (1, *STAGES))
    bm, bn, bk, ds, w, s = (p[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "BLOCK_SIZE_DSTATE",
                                           "num_warps", "num_stages"))
    if ds > 128:
        raise CannotPredict(f"BLOCK_SIZE_DSTATE {ds} > 128: the kernel's second K loop, not checked; size it")
    flags = [f for f, want in (("HAS_Z", False), ("IS_CAUSAL", True)) if bool(p[f]) != want]
    if flags:
        raise CannotPredict(f"{', '.join(f'{f}={p[f]}' for f in flags)}: not a launch the rule was checked on "
                            "(vLLM's prefill passes z=None and IS_CAUSAL=True); size it")
    sizes = {**ACTIVATIONS, "fp32": F32}
    if p["x_dtype"] not in ACTIVATIONS or p["C_dtype"] != p["x_dtype"] or p["cb_dtype"] != "fp32" \
            or p["states_dtype"] not in sizes or p["init_dtype"] not in (None, p["states_dtype"]):
        raise CannotPredict(f"x {p['x_dtype']}, C {p['C_dtype']}, CB {p['cb_dtype']}, states {p['states_dtype']}, "
                            f"initial states {p['init_dtype']}: checked for bf16 / fp16 activations, fp32 CB, and "
                            "fp32 / bf16 / fp16 states with initial states of the same dtype; size it")
    e = ACTIVATIONS[p["x_dtype"]]
    for name, elems in (("x", bk * bn), ("C", bm * ds)):
        _thin(name, elems, e, w)
    state = bm * ds * e + ds * bn * (sizes[p["states_dtype"]] if p["HAS_INITSTATES"] else e)
    if s == 1:
        if bk > ds:
            raise CannotPredict(f"num_stages 1 with BLOCK_SIZE_K {bk} > BLOCK_SIZE_DSTATE {ds}: the unpipelined K "
                                "loop may then outgrow the state dot, not checked; size it")
        return _epilogue(state, bm, bn, p["out_size"], w, "out")
    loop = (s - 1) * (bm * bk * F32 + bk * bn * e + 2 * bk * F32) + bm * bk * e
    return _epilogue(max(state, loop), bm, bn, p["out_size"], w, "out")


def cumsum(p: dict) -> int:
    """Rule 6 (_chunk_cumsum_fwd_kernel)."""
    bh, bc, w = p["BLOCK_SIZE_H"], p["BLOCK_SIZE_CHUNK"], p["num_warps"]
    if bh not in CUMSUM_H or bc not in CUMSUM_CHUNK:
        raise CannotPredict(f"BLOCK_SIZE_H {bh}, BLOCK_SIZE_CHUNK {bc}: checked for {CUMSUM_H} x {CUMSUM_CHUNK}; "
                            "size it")
    if w not in CUMSUM_WARPS:
        raise CannotPredict(f"num_warps {w}: the cumsum rule was checked for {CUMSUM_WARPS} (at 1 or 2 warps with "
                            "64 heads it measured less); size it")
    if not p["chunk_size"] <= bc or p["nheads"] < bh:
        raise CannotPredict(f"chunk_size {p['chunk_size']} over BLOCK_SIZE_CHUNK {bc}, or {p['nheads']} heads under "
                            f"BLOCK_SIZE_H {bh}: not checked; size it")
    sizes = {**ACTIVATIONS, "fp32": F32}
    if p["dt_dtype"] not in sizes or p["dt_out_dtype"] != "fp32" or p["dA_dtype"] != "fp32":
        raise CannotPredict(f"dt {p['dt_dtype']}, dt_out {p['dt_out_dtype']}, dA_cumsum {p['dA_dtype']}: checked "
                            "for bf16 / fp16 / fp32 dt and fp32 outputs; size it")
    v = min(16 // sizes[p["dt_dtype"]], bh)
    if bh * bc < 32 * w * v:
        raise CannotPredict(f"a {bh}x{bc} tile with {w} warps holds under one {v}-element vector per thread: the "
                            "layouts replicate, not modelled; size it")
    return bh * min(bc, 128 * w // v) * F32


RULES = {"_chunk_cumsum_fwd_kernel": cumsum, "_bmm_chunk_fwd_kernel": bmm, "_chunk_state_fwd_kernel": chunk_state, "_chunk_scan_fwd_kernel": chunk_scan,
         "_state_passing_fwd_kernel": lambda p: 0}


def predict(kernel: str, params: dict, cc: int, triton_version: str, *, source_sha256: str) -> int:
    """metadata.shared of one launch of vLLM's SSD `kernel` with `params` (its BLOCK_SIZE_* constexprs, num_warps,
    num_stages, the dtypes and flags each rule reads); source_sha256: the sha256 of the engine file defining it."""
    _check_scope(kernel, triton_version, source_sha256, cc)
    return RULES[kernel](params)
