"""Rules for family flashinfer-moe (cutlass_harness/families/flashinfer_moe.cuh FlashinferMoeKernel): FlashInfer
0.7.4's CUTLASS fused-MoE grouped GEMMs (TensorRT-LLM's TMA warp-specialized MoE launcher), composed from the CUTLASS
4.5.0 bundled with flashinfer (data/cutlass/include) plus TensorRT-LLM's cutlass_extensions (data/csrc/nv_internal/
tensorrt_llm/cutlass_extensions/include, X/ below) for the finalize (scatter) epilogue.

SM120 (sm_120a, sm_121a; cutlass::arch::Sm120): block-scaled ptr-array grouped GEMM, KernelScheduleAuto, epilogue
schedule TmaWarpSpecialized (the builder still returns Sm120PtrArrayTmaWarpSpecialized for pointer strides), bf16 D,
C element bf16 (= D) even though no bias is read, StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>.
  dtypes 'nvfp4xnvfp4': nv_float4_t<e2m1> x nv_float4_t<e2m1>, ue4m3 scale factors per 16 K (as sm120-nvfp4).
  dtypes 'mxfp8xmxfp4': mx_float8_t<e4m3> activations x mx_float4_t<e2m1> weights, ue8m0 scale factors per 32 K;
    the F8F6F4 MMA keeps the fp4 operand unpacked in smem (one byte an element), so A and B are M*K and N*K bytes.
SM90 (sm_90a): dtypes 'fp8xfp8', cooperative FP8 fast-accum, C void, D bf16 (default) or void (finalize);
    the stage/epilogue rules are sm90-fp8's (tileprobe.predict.sm90_fp8) where they were verified, see _predict_sm90.

Headers: B/ = include/cutlass/gemm/collective/builders/, C/ = include/cutlass/gemm/collective/,
E/ = include/cutlass/epilogue/collective/, F/ = include/cutlass/epilogue/fusion/; all CUTLASS 4.5.0 (flashinfer 0.7.4).
"""

from __future__ import annotations

from functools import lru_cache

from tileprobe.dtypes import ACT_BITS

from tileprobe.predict import _sm90_array as arr
from tileprobe.predict import sm90_fp8, sm120_nvfp4
from tileprobe.predict._common import CannotPredict, Prediction, Unbuildable
from tileprobe.predict._layout import Struct, up

FAMILY = "flashinfer-moe"
VERSIONS = {"4.5": ("4.5.0",)}  # the CUTLASS the releases below bundle
# Keyed by the engine release, not by a CUTLASS version: the kernels are flashinfer's own (its launcher, dispatch and
# cutlass_extensions) compiled against the CUTLASS it bundles, so a prediction stands for one release's tree. Each
# release here was checked by compiling every tactic of it (static sweeps, --jobs 1): every measured size equal to the
# model's (prediction 'exact' on 44 configs of 80, the rest unbuildable as the model says). The hash is the bundled
# CUTLASS tree's content hash as those rows record it (cutlass_hash, tileprobe.backends.cutlass.toolchain). Evidence:
#   flashinfer 0.7.4: results/static/{rtx-pro-6000,rtx-5090,dgx-spark-gb10}__flashinfer-moe
#   flashinfer 0.7.2.post1 (the pin of vLLM's pin-table release): results/static/rtx-pro-6000__flashinfer-moe__flashinfer-0.7.2.post1
#   flashinfer 0.7.2 (the pin of SGLang's pin-table release): results/static/rtx-pro-6000__flashinfer-moe__flashinfer-0.7.2
# Any other release is CannotPredict (compile it), and so is one of these whose CUTLASS tree hashes differently.
ENGINES = {"flashinfer 0.7.4": ("4.5", "c5d864a34465695d"),
           "flashinfer 0.7.2.post1": ("4.5", "c5d864a34465695d"),
           "flashinfer 0.7.2": ("4.5", "c5d864a34465695d")}
ARCHS = ("sm_120a", "sm_121a", "sm_90a")
EPILOGUES = ("default", "finalize")
TAKES_DTYPES = True  # predict() passes dtypes= and cluster= to this module
DTYPES_BY_ARCH = {"sm_120a": ("nvfp4xnvfp4", "mxfp8xmxfp4"), "sm_121a": ("nvfp4xnvfp4", "mxfp8xmxfp4"),
                  "sm_90a": ("fp8xfp8",)}

# SM120 ------------------------------------------------------------------------------------------------------------

# Per dtype pair: (smem bits of an A/B element, scale-factor vector). nvfp4: packed e2m1 (4 bits), 16 K per SF.
# mxfp8 x mxfp4: B/sm120_blockscaled_mma_builder.inl picks the F8F6F4 MMA, whose smem element for e2m1 is the unpacked
# float_e2m1_unpacksmem_t (8 bits), so both operands are one byte an element; mx_float*_t carry one ue8m0 per 32 K.
_SM120_OPERANDS = {"nvfp4xnvfp4": (4, 16), "mxfp8xmxfp4": (8, 32)}


def _sf_stage_bytes(rows: int, k: int, vec: int) -> int:
    """One stage of an SF smem layout: rows/128 atoms of 128 rows, K/vec scale factors a row (the builder's
    SmemLayoutAtomSF; B/sm120_blockscaled_mma_builder.inl), as sm120_nvfp4._sf_stage_bytes with the vector size."""
    return (rows // sm120_nvfp4.BLK_MN) * sm120_nvfp4.BLK_MN * (k // vec)


_ML_TENSORMAPS = Struct("mainloop.TensorMapStorage", align=128)
_ML_TENSORMAPS.add("tensormaps_A_B_SFA_SFB", 4 * arr.TMA_DESCRIPTOR, 64)


@lru_cache(maxsize=4096)
def _sm120_mainloop(m: int, n: int, k: int, stages: int, dtypes: str) -> tuple[Struct, Struct, Struct]:
    """C/sm120_blockscaled_mma_array_tma.hpp (4.5.0) SharedStorage, as sm120_nvfp4._mainloop: A, B alignas(1024);
    SFA, SFB alignas(16) with SFB rows = max(N, 128); 4 TMA descriptors; 16 B of barriers a stage."""
    bits, vec = _SM120_OPERANDS[dtypes]
    t = Struct("mainloop.TensorStorage", align=128)
    t.add("A", stages * m * k * bits // 8, 1024)
    t.add("B", stages * n * k * bits // 8, 1024)
    t.add("SFA", up(stages * _sf_stage_bytes(m, k, vec), 16), 16)
    sfb = stages * _sf_stage_bytes(max(n, sm120_nvfp4.BLK_MN), k, vec) + sm120_nvfp4._sfb_divide_overhang(n, "4.5")
    t.add("SFB", up(sfb, 16), 16)
    s = Struct("mainloop.SharedStorage")
    s.add_struct("tensors", t)
    s.add_struct("tensormaps", _ML_TENSORMAPS)
    s.add("pipeline", 2 * arr.BARRIER * stages, 16)
    return t, _ML_TENSORMAPS, s


def _sm120_stage_rule(m: int, n: int, k: int, carveout: int, dtypes: str) -> tuple[int, int, int]:
    """sm100_compute_stage_count_or_override_blockscaled as the SM120 block-scaled builder calls it (4.5.0; see
    sm120_nvfp4._stage_rule): capacity 101376 - 128 - 256 - 48 = 100944; a stage charges A + B (in smem bits) +
    round_up(16, 128) + SFA + SFB (128-row SFB for N < 128); stages = (capacity - carveout) // stage."""
    bits, vec = _SM120_OPERANDS[dtypes]
    capacity = sm120_nvfp4.CAPACITY - 2 * arr.BARRIER * 8 - 2 * arr.TMA_DESCRIPTOR - 2 * arr.BARRIER * 3
    stage = ((m + n) * k * bits // 8 + 128 + _sf_stage_bytes(m, k, vec)
             + _sf_stage_bytes(max(n, sm120_nvfp4.BLK_MN), k, vec))
    return (capacity - carveout) // stage, stage, capacity


def _sm120_epilogue(m: int, n: int, finalize: bool, swap_ab: bool) -> tuple[arr.EpilogueParams, tuple]:
    """E/builders/sm120_builder.inl (4.5.0). Epilogue tile 64x32 (EpilogueTileAuto, not the sparse schedule).
    sm120_get_tma_dispatch_policy sees the builder's ElementC / ElementD as given:
      default: C = D = bf16 -> ReuseSmem, StagesD = min(EpiTiles, 2), StagesC = max(min(EpiTiles, 2), StagesD + 1):
        exactly sm120-nvfp4's with-c epilogue (a C/D union of StagesC tiles), tileprobe.predict._sm90_array.
      finalize: D = void (0 bits) -> no ReuseSmem, StagesC = StagesD = min(EpiTiles, 2); see _finalize_storage."""
    em, en = sm120_nvfp4.EPI_TILE
    tiles = (m // em) * (n // en)
    stages_d = min(tiles, 2)
    if not finalize:
        ep = arr.EpilogueParams(em, en, max(min(tiles, 2), stages_d + 1), stages_d, True, True, swap_ab,
                                sm120_nvfp4.EPI_WARP_GROUPS)
        return ep, arr.epilogue_storage(ep)
    ep = arr.EpilogueParams(em, en, stages_d, stages_d, False, True, swap_ab, sm120_nvfp4.EPI_WARP_GROUPS)
    return ep, _finalize_storage(ep, n, swap_ab, void_c=False)


@lru_cache(maxsize=1024)
def _finalize_storage(p: arr.EpilogueParams, n: int, swap_ab: bool, void_c: bool) -> tuple[Struct, Struct, Struct]:
    """The Sm90 ptr-array epilogue collective with D element void and TensorRT-LLM's scatter fusion.

    E/sm90_epilogue_array_tma_warpspecialized.hpp (4.5.0): is_destination_supported = false, so ReuseSmemC is false
    and SmemElementD = get_element_aux_t<FusionCallbacks> (the scatter's ElementOutput, bf16), but the collective
    storage is still CollectiveStorageWithC { alignas(AlC) C[StagesC tiles]; alignas(AlD) D[StagesD tiles]; } when C
    is non-void (SM120: C = bf16), or CollectiveStorageWithoutC (union { array<C,0>; D[StagesD tiles] }) when C is
    void (SM90). The D array is then the scratch buffer Sm90ScatterPtrArray stages its output tile through
    (X/cutlass_extensions/epilogue/fusion/sm90_visitor_scatter.hpp: "Not enough space in scratch smem buffer").

    FusionStorage = the EVT's SharedStorage, a cute::tuple of its nodes' storages (F/sm90_visitor_tma_warpspecialized
    .hpp; empty nodes take no space). In X/.../sm90_visitor_scatter.hpp only one node stores anything, the
    Sm90RowBroadcast (F/sm90_visitor_load_tma_warpspecialized.hpp: array_aligned<ElementInput, CTA_N> smem):
      swap_ab = 0: ScaledAccPerColBiasPerRowScaleScatter: per-row router scale is an Sm90ColBroadcast (no smem), the
        per-column bias an Sm90RowBroadcast<bf16*>: 2*N bytes;
      swap_ab = 1: ScaledAccPerRowBiasPerColScaleScatter: per-column router scale an Sm90RowBroadcast<float*>
        (ElementScalar = float): 4*N bytes; the bias an Sm90ColBroadcast (no smem).
    The scatter node itself (Sm90ScatterPtrArray), Sm90Compute, Sm90AccFetch, Sm90ScalarBroadcastPtrArray: empty.
    """
    tile = p.epi_m * p.epi_n * arr.BF16
    al = arr.swizzle_atom_alignment(p.epi_m if p.d_col_major else p.epi_n, arr.BF16)
    coll = Struct("collective")
    if void_c:
        coll.add("D", tile * p.stages_d, al)
    else:
        coll.add("C", tile * p.stages_c, al)
        coll.add("D", tile * p.stages_d, al)
    row_bcast = n * (4 if swap_ab else arr.BF16)
    tensors = Struct("epilogue.TensorStorage")
    tensors.add_struct("collective", coll)
    tensors.add("fusion.row_broadcast", up(row_bcast, 16), 16)
    tmaps = Struct("epilogue.TensorMapStorage", align=128)
    tmaps.add("tensormap_C", arr.TMA_DESCRIPTOR, 64)
    tmaps.add("tensormap_D", arr.TMA_DESCRIPTOR * p.num_epilogue_warp_groups, 64)
    whole = Struct("epilogue.SharedStorage")
    whole.add_struct("tensors", tensors)
    whole.add_struct("tensormaps", tmaps)
    whole.add("pipeline", 2 * arr.BARRIER * p.stages_c, arr.BARRIER)
    return tensors, tmaps, whole


def _check_sm120(m: int, n: int, k: int, dtypes: str) -> None:
    if dtypes == "mxfp8xmxfp4" and k * ACT_BITS[dtypes] // 8 == 64:
        # flashinfer's get_candidate_configs_sm120 (cutlass_heuristic.cpp) drops the ...x64B tactics for fp8
        # activations: "the ...x64B tiles only work with FP4 activations (FP8 breaks the TMA K alignment)"
        raise Unbuildable(f"{m}x{n}x{k} ({m}x{n}x64B) with MXFP8 activations: flashinfer builds the x64B tactics for "
                          "FP4 activations only (FP8 breaks the TMA K alignment)", "unsupported")
    sm120_nvfp4.check(m, n, k, "auto", "sm_120a", "4.5")


def _predict_sm120(m, n, k, stages, finalize, swap_ab, dtypes, version) -> Prediction:
    _check_sm120(m, n, k, dtypes)
    ep, (ep_tensors, ep_tmaps, ep_whole) = _sm120_epilogue(m, n, finalize, swap_ab)
    # flashinfer_moe.cuh: StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>, the same carveout rule
    # as sm120-nvfp4's kernels.cuh; what differs is the epilogue it measures (finalize: C + D + row broadcast).
    carveout = ep_whole.size
    auto, stage_bytes, capacity = _sm120_stage_rule(m, n, k, carveout, dtypes)
    chosen = stages if stages > 0 else auto

    def assemble(s: int) -> Prediction:
        ml_tensors, ml_tmaps, ml_whole = _sm120_mainloop(m, n, k, s, dtypes)
        # KernelScheduleAuto -> KernelPtrArrayTmaWarpSpecializedCooperativeBlockScaledSm120 for a grouped problem
        kernel = arr.kernel_storage(ml_tensors, ml_tmaps, s, ep_tensors, ep_tmaps, ep.stages_c, pingpong=False)
        return Prediction(FAMILY, version, s, kernel.size, ml_whole.size, ep_whole.size,
                          kernel.size - kernel.member_size("tensors"), kernel, stage_bytes, carveout, capacity,
                          stages == 0)

    return _stage_guard(chosen, stages, assemble, f"({capacity} - {carveout}) // {stage_bytes}")


def _stage_guard(chosen: int, stages: int, assemble, why_auto: str) -> Prediction:
    if chosen < 2:
        # C/sm120_blockscaled_mma_array_tma.hpp and C/sm90_mma_array_tma_gmma_ss_warpspecialized.hpp:
        #   static_assert(DispatchPolicy::Stages >= 2, "Specialization requires Stages set to value 2 or more.")
        two = assemble(2)
        why = f"the auto carveout fits {chosen} stage(s): {why_auto}" if stages == 0 else f"StageCount<{stages}>"
        raise Unbuildable(f"CUTLASS static_assert 'Stages set to value 2 or more': {why}; with 2 stages "
                          f"SharedStorage is {two.smem_bytes} B", "too-few-stages", two)
    return assemble(chosen)


# SM90 -------------------------------------------------------------------------------------------------------------

# (tile M, N, K elements) -> clusters verified by compiling (results/h200/flashinfer-moe static rows: flashinfer 0.7.4's
# SM90 tactics, both epilogues, both swaps). Cluster shape enters none of the SharedStorage rules below (it only
# changes TMA multicast), but a tile/cluster not compiled is refused rather than extrapolated.
SM90_VERIFIED = {(128, 16, 128): ((1, 1), (2, 1)), (128, 64, 128): ((1, 1), (2, 1)),
                 (128, 128, 128): ((1, 1), (2, 1), (1, 2), (2, 2))}


def _predict_sm90(m, n, k, schedule, stages, finalize, swap_ab, cluster, version) -> Prediction:
    """flashinfer_moe.cuh Arch 90: KernelPtrArrayTmaWarpSpecializedCooperativeFP8FastAccum, epilogue schedule
    PtrArrayTmaWarpSpecializedCooperative, C void, D bf16 (default) or void (finalize): sm90-fp8's no-c kernel
    (tileprobe.predict.sm90_fp8: same builders, same stage rule, same mainloop) for the default epilogue.

    Finalize: E/builders/sm90_builder.inl (4.5.0) CollectiveBuilder resolves a void ElementD to
    get_element_aux_t<FusionOperation> (the scatter's bf16 output) BEFORE sm90_compute_tile_shape_or_override and
    sm90_get_tma_dispatch_policy, so the epilogue tile and StagesC/StagesD equal the default epilogue's (C void: no
    reuse, StagesC = min(tiles, 4), StagesD = min(tiles, 2)). (The SM120 builder passes the void D through to its
    dispatch policy instead; see _sm120_epilogue.) The collective is CollectiveStorageWithoutC (C void), a union
    holding StagesD bf16 D tiles, and the fusion storage is the scatter EVT's row broadcast (_finalize_storage)."""
    if schedule not in ("cooperative", "auto"):
        raise Unbuildable(f"{FAMILY} on sm_90a is cooperative (FP8 fast accumulation), not {schedule}", "unsupported")
    sm90_fp8.check(m, n, k, "cooperative", "sm_90a")
    if cluster[2] != 1 or cluster[:2] not in SM90_VERIFIED.get((m, n, k), ()):
        raise CannotPredict(f"{FAMILY} on sm_90a: tile {m}x{n}x{k} with cluster {cluster[0]}x{cluster[1]}x{cluster[2]} "
                            "was not verified by compiling (verified: " + "; ".join(
                                f"{a}x{b}x{c} cluster " + ",".join(f"{x}x{y}" for x, y in cl)
                                for (a, b, c), cl in SM90_VERIFIED.items()) + "); compile it instead")
    ep = sm90_fp8._epilogue(m, n, "cooperative", False, swap_ab)
    if finalize:
        ep_tensors, ep_tmaps, ep_whole = _finalize_storage(ep, n, swap_ab, void_c=True)
    else:
        ep_tensors, ep_tmaps, ep_whole = arr.epilogue_storage(ep)
    carveout = ep_whole.size  # StageCountAutoCarveout<sizeof(CollectiveEpilogue::SharedStorage)>
    auto, stage_bytes, capacity = sm90_fp8._stage_rule(m, n, k, carveout)
    chosen = stages if stages > 0 else auto

    def assemble(s: int) -> Prediction:
        ml_tensors, ml_tmaps, ml_whole = sm90_fp8._mainloop(m, n, k, s)
        kernel = arr.kernel_storage(ml_tensors, ml_tmaps, s, ep_tensors, ep_tmaps, ep.stages_c, pingpong=False)
        return Prediction(FAMILY, version, s, kernel.size, ml_whole.size, ep_whole.size,
                          kernel.size - kernel.member_size("tensors"), kernel, stage_bytes, carveout, capacity,
                          stages == 0)

    return _stage_guard(chosen, stages, assemble, f"({capacity} - {up(carveout, sm90_fp8.ALIGNMENT)}) // {stage_bytes}")


# entry ------------------------------------------------------------------------------------------------------------

def predict(m: int, n: int, k: int, schedule: str, stages: int, epilogue: str, swap_ab: bool, arch: str,
            version: str, dtypes: str | None = None, cluster=None) -> Prediction:
    if arch not in ARCHS:
        raise Unbuildable(f"{FAMILY} builds for {', '.join(ARCHS)}, not {arch}", "unsupported")
    if epilogue not in EPILOGUES:
        raise CannotPredict(f"unknown epilogue {epilogue!r} for {FAMILY}; known: {', '.join(EPILOGUES)}")
    dtypes = dtypes or DTYPES_BY_ARCH[arch][0]
    if dtypes not in DTYPES_BY_ARCH[arch]:
        if dtypes in ACT_BITS:
            raise Unbuildable(f"{FAMILY} on {arch} takes dtypes {', '.join(DTYPES_BY_ARCH[arch])}, not {dtypes}",
                              "unsupported")
        raise CannotPredict(f"unknown dtypes {dtypes!r} for {FAMILY}; known: {', '.join(ACT_BITS)}")
    cl = tuple(int(c) for c in (cluster or (1, 1, 1)))
    finalize = epilogue == "finalize"
    if arch == "sm_90a":
        return _predict_sm90(m, n, k, schedule, stages, finalize, swap_ab, cl, version)
    if cl[:2] != (1, 1):
        # flashinfer_moe.cuh: static_assert(Arch != 120 || (ClusterM == 1 && ClusterN == 1))
        raise Unbuildable(f"{FAMILY} on SM120 is cluster 1x1x1 only, not {cl}", "unsupported")
    if schedule not in ("auto", "cooperative"):
        raise Unbuildable(f"{FAMILY} on SM120 uses KernelScheduleAuto, not {schedule}", "unsupported")
    return _predict_sm120(m, n, k, stages, finalize, swap_ab, dtypes, version)
