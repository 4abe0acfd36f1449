"""marlin-moe: vLLM's Marlin MoE launch, answered from a cached vLLM wheel (picked at random: 0.33.0 ships sm_120f
SASS for these kernels, 0.34.0 only sm_75/sm_80 cubins and compute_80 PTX). For random MoE shapes, each GEMM's
chosen thread config must be one of the binary's own tables, have a Marlin instantiation in its fatbin, fit
`max_shared_mem - 512` by get_kernel_cache_size, and the launch must ask the whole opt-in (one block per SM) or
`opt-in / blocks - 1024`, never less than the cache it needs; a K no thread config divides is refused."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from _session_draw import session_rng
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import marlin
from tileprobe.backends.cutlass.build import cache_root
from tileprobe.binary.inspect import runs_on
from tileprobe.engines import locate
from tileprobe.engines.triton_configs import find_engine
from tileprobe.targets import PROFILES
from tileprobe.verdict import Verdict

TARGETS = ["rtx-pro-6000", "dgx-spark-gb10", "h100"]


@pytest.fixture(scope="module")
def engine(vllm_wheel):
    return vllm_wheel  # one wheel a run: a second .so would double the file's time


def _call(**params) -> KernelCall:
    return KernelCall("moe experts", "prefill", marlin.NAME, "moe_wna16_marlin_gemm", params, "test", "vllm")


def test_thread_config_tables_are_the_binarys(engine):
    ctx = Context(PROFILES["rtx-pro-6000"], engine, cache_root())
    path, _ = marlin.library(ctx, marlin.MOE_SO)
    tables = marlin.config_tables(path)
    assert set(tables) == {"small", "large"}
    for rows in tables.values():
        assert rows and all(tk % 16 == 0 and tn % 16 == 0 and th in (128, 256) for tk, tn, th in rows), tables


def test_random_moe_shapes_launch_what_fits(engine, rng):
    memo = {}
    for _ in range(4):
        target = PROFILES[rng.choice(TARGETS)]
        ctx = Context(target, engine, cache_root(), memo=memo)
        quant = rng.choice(["mxfp4", "mxfp4", "int4"])
        hidden, inter = 256 * rng.randint(4, 24), 128 * rng.randint(4, 40)
        experts, top_k, tokens = rng.choice([32, 64, 128, 256]), rng.randint(1, 8), rng.randint(1, 16384)
        a = marlin.answer(_call(experts=experts, top_k=top_k, hidden=hidden, inter=inter, quant=quant,
                                tokens=tokens, dtype="bf16"), ctx)
        assert a.gate.ok is True and a.verdict(target) is Verdict.FITS, a.reason(target)
        path, _ = marlin.library(ctx, marlin.MOE_SO)
        tables = marlin.config_tables(path)
        block_size_m = int(a.kernel.split("block_size_m ")[1].split(",")[0])
        thread_m_blocks = math.ceil(block_size_m / 16)
        launches = []
        chosen = re.findall(r"(gemm\d) \{(\d+), (\d+), (\d+)\} x (\d+)/SM", a.kernel)
        assert [c[0] for c in chosen] == ["gemm1", "gemm2"], a.kernel
        for cfg, tk, tn, th, blocks in ((c[0], *map(int, c[1:])) for c in chosen):
            assert (tk, tn, th) in tables["large" if thread_m_blocks > 1 else "small"], (cfg, tables)
            cache = marlin.cache_size(tk, tn, thread_m_blocks, 4, 32 if quant == "mxfp4" else 128, 4)
            assert cache <= target.smem_optin - 512, cfg
            launch = target.smem_optin if blocks == 1 else target.smem_optin // blocks - 1024
            assert cache <= launch <= target.smem_optin, cfg
            launches.append(launch)
        assert a.smem_bytes == max(launches) + (a.static_smem or 0), a.reason(target)


def test_the_chosen_kernels_run_where_the_arch_answer_says(engine, rng):
    target = PROFILES[rng.choice(["rtx-pro-6000", "dgx-spark-gb10"])]
    ctx = Context(target, engine, cache_root())
    a = marlin.answer(_call(experts=128, top_k=4, hidden=2880, inter=2880, quant="mxfp4", group_size=32,
                            tokens=rng.randint(1, 4096), dtype="bf16"), ctx)
    assert "2880 -> 3072" in " ".join(a.notes) and "2880 -> 2944" in " ".join(a.notes)  # the MARLIN padding
    path, lib = marlin.library(ctx, marlin.MOE_SO)
    sass = [im for im, k in lib.kernels if "Marlin<" in k.demangled and runs_on("cubin", im.sm, im.suffix,
                                                                               target.cc_int)]
    if sass:
        assert "SASS" in a.arch.answer and a.registers is not None, a.arch.answer
    else:
        assert "JIT" in a.arch.answer and a.smem_bytes == target.smem_optin, a.reason(target)
    assert a.arch.ok and a.verdict(target) is Verdict.FITS


def test_k_no_config_divides_is_refused(engine, rng):
    ctx = Context(PROFILES[rng.choice(TARGETS)], engine, cache_root())
    hidden = 64 * rng.randint(8, 64) + 32  # int4 weights are not padded: K = hidden is not a multiple of 64
    a = marlin.answer(_call(experts=64, top_k=2, hidden=hidden, inter=1024, quant="int4", tokens=64,
                            dtype="bf16"), ctx)
    assert a.gate.ok is False and "Invalid thread config" in a.gate.answer
    assert a.verdict(ctx.target) is Verdict.REFUSED
    assert math.gcd(hidden, 64) == 32
