"""Rules for family vllm-moe (cutlass_harness/families/vllm_moe.cuh VllmMoeKernel): the engines' own NVFP4 MoE grouped
GEMMs, as read from vLLM (the pin table's release, tileprobe.engines.pins) and sgl-kernel 0.3.21 and proven by the
wheels' kernel symbols.

SM120/SM121: the composition is, type for type, sm120-nvfp4's with-c config (nv_float4_t<e2m1> A row-major / B
column-major, alignment 32; bf16 C = D row-major, alignment 8; OpClassBlockScaledTensorOp epilogue with
EpilogueTileAuto and EpilogueScheduleAuto; LinearCombination<bf16, float, bf16, float>; StageCountAutoCarveout<sizeof
epilogue storage>; cluster 1x1x1), with the engine's schedule: vLLM's KernelScheduleAuto (the builder's
cooperative kernel), sgl-kernel 0.3.21 pingpong. So the rules are tileprobe.predict.sm120_nvfp4's (epilogue 'with-c').
The C element is non-void, so the epilogue reuses C smem for D (StagesC = StagesD + 1): the per-expert alpha pointer
array and beta = 0 are runtime arguments and change no type.

sm_100a (vLLM's sm100 branch): no SM100 rules in tileprobe (CannotPredict); its rows carry compiled sizes only.
Verified by compiling the committed static rows (results/static/*__vllm-moe) with CUTLASS 4.5.0, the CUTLASS whose
compiled symbols equal the wheels' (tests/families/test_vllm_moe.py).
"""

from __future__ import annotations

from dataclasses import replace

from tileprobe.predict import sm120_nvfp4
from tileprobe.predict._common import CannotPredict, Prediction, Unbuildable

FAMILY = "vllm-moe"
VERSIONS = {"4.5": ("4.5.0",)}
ARCHS = ("sm_120a", "sm_121a", "sm_100a")
EPILOGUES = ("linear-combination",)
# The engines' SM120 schedules (tileprobe.families.vllm_moe.COMPOSITIONS) and the sm120-nvfp4 schedule they build.
# Rows spell the family's auto schedule as the builder resolves it ('auto->cooperative').
SM120_SCHEDULES = {"auto": "auto", "auto->cooperative": "auto", "cooperative": "cooperative", "pingpong": "pingpong"}


def predict(m: int, n: int, k: int, schedule: str, stages: int, epilogue: str, swap_ab: bool, arch: str,
            version: str) -> Prediction:
    if arch == "sm_100a":
        raise CannotPredict("vllm-moe sm_100a: tileprobe has no SM100 block-scaled rules; compile it instead")
    if arch not in ARCHS:
        raise Unbuildable(f"{FAMILY} builds for {', '.join(ARCHS)}, not {arch}", "unsupported")
    if schedule not in SM120_SCHEDULES:
        raise Unbuildable(f"{FAMILY} on SM120 is built auto (vLLM) or pingpong (sgl-kernel), not {schedule}",
                          "unsupported")
    if swap_ab:
        raise Unbuildable(f"{FAMILY}: the engines do not swap A and B", "unsupported")
    p = sm120_nvfp4.predict(m, n, k, SM120_SCHEDULES[schedule], stages, "with-c", False, arch, version)
    return replace(p, family=FAMILY)
