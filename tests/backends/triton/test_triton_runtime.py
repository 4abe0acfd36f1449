"""The runtime path of triton-moe (tensors, the engines' token alignment, the launch's real arguments, the
element-wise check) run through Triton's CPU interpreter on the engines' own kernels, small shapes: fp8 operands as
the engines pass them for fp8 / fp8-block, fp32 ones for bf16 (the interpreter has no bf16; on a GPU the launch is
the engines' bf16 one), SGLang's PDL hooks off (the interpreter cannot run griddepcontrol). A wrong alignment,
argument order or reference makes the check fail; the test also corrupts one output element and expects it caught."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("torch")

pytestmark = pytest.mark.triton
ROOT = Path(__file__).resolve().parents[3]

SCRIPT = r'''
import json, random, sys
import torch
from tileprobe.backends.triton import runtime as rt
from tileprobe.backends.triton.source import load
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.families import triton_moe as tm
from tileprobe.families.base import Accumulation
from tileprobe.results import tolerance
from tileprobe.triton.sweep import engine_kernel_source
engine, gemm, m, bm, seed, cache = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
quant = sys.argv[7]
_, src = engine_kernel_source(engine, None)
kernel = load(src, cache_root(cache))
experts, top_k, n, k = 8, 2, 64, 96
entry = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 2}
job = tm.launch_job(engine, src, quant, gemm, experts, n, k, m, top_k, entry, 120)
# fp32 compute (no bf16 in the interpreter); SGLang's PDL hooks (USE_GDC: griddepcontrol) need a GPU
over = {"compute_type": "tl.float32", "USE_GDC": False, "launch_pdl": False}
job = tm.KernelJob(job.source, job.args, tuple((kk, over.get(kk, v)) for kk, v in job.kwargs), job.cc)
naive = dict(job.kwargs).get("naive_block_assignment", False)
p = rt.Problem(engine, quant, gemm, experts, n, k, m, top_k)
bound = tolerance.derive(1e-4, 1e-4, k, Accumulation())  # fp32 compute in the interpreter
out = rt.run_point(kernel, job, p, seed, "cpu", bound, naive=naive, dtype=torch.float32, timed=False)
t = rt.make_tensors(p, seed, "cpu", torch.float32)
first = rt.launcher(kernel, job, p, t, *rt.align(engine, t.topk_ids, bm, experts, naive))
first()
t.c[random.Random(seed).randrange(m), 0, 5] += 1.0
out["corrupted"] = rt.check(p, t, bound)["bad_elements"]
out["naive"] = naive
print(json.dumps(out))
'''


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_interpreted_launch_matches_the_reference(engine, tmp_path):
    r = random.Random()
    gemm, m, bm, seed = r.choice(["gate_up", "down"]), r.choice([1, 3, 5]), r.choice([16, 32]), r.randrange(10**6)
    quant = r.choice(["bf16", "fp8", "fp8-block"])  # bf16 launches with fp32 operands here (see the docstring)
    print(engine, quant, gemm, m, bm, seed)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", SCRIPT, engine, gemm, str(m), str(bm), str(seed), str(tmp_path),
                        quant],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    if p.returncode and "UsageError" in p.stderr and "wheel" in p.stderr:
        pytest.skip(p.stderr.strip().splitlines()[-1])
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["verified"] and out["bad_elements"] == 0 and out["checked_elements"] == m * 2 * 64
    assert out["rel_err"] < 1e-5 and out["corrupted"] == 1


def test_a_config_that_fails_to_launch_is_its_own_row_and_later_configs_run(monkeypatch, tmp_path):
    """tileprobe.backends.triton.isolated on the interpreter: configs of one problem in a child process; the first
    config's launch raises (its A pointer replaced by an int), so that child ends and a fresh one runs the rest:
    launch-error for it, verified for the others (with the bound in the row's columns)."""
    import torch

    from tileprobe.backends.triton import isolated
    from tileprobe.backends.triton import runtime as rt
    from tileprobe.backends.triton.compile import KernelJob
    from tileprobe.errors import UsageError
    from tileprobe.families import triton_moe as tm
    from tileprobe.families.base import Accumulation
    from tileprobe.results import tolerance
    from tileprobe.triton.sweep import engine_kernel_source
    from tileprobe.verdict import Verdict

    r = random.Random()
    engine = r.choice(["vllm", "sglang"])
    try:
        _, src = engine_kernel_source(engine, None)
    except UsageError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    experts, top_k, n, k, m = 8, 2, 64, 64, r.choice([2, 3])
    quant, gemm = r.choice(["fp8", "fp8-block"]), r.choice(["gate_up", "down"])
    over = {"compute_type": "tl.float32", "USE_GDC": False, "launch_pdl": False}
    jobs = []
    for bm in (16, 16, 32):
        entry = {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4,
                 "num_stages": 2}
        job = tm.launch_job(engine, src, quant, gemm, experts, n, k, m, top_k, entry, 120)
        jobs.append(KernelJob(job.source, job.args, tuple((kk, over.get(kk, v)) for kk, v in job.kwargs), job.cc))
    broken = list(jobs[0].args)
    broken[rt.POINTERS[engine]["a"]] = 7  # not a pointer: the launch raises in the child
    jobs[0] = KernelJob(jobs[0].source, tuple(broken), jobs[0].kwargs, jobs[0].cc)
    bound = tolerance.derive(1e-4, 1e-4, k, Accumulation())
    p = rt.Problem(engine, quant, gemm, experts, n, k, m, top_k)
    res = isolated.run_configs(src, tmp_path, p, r.randrange(10**6), jobs, [bound] * 3, device="cpu",
                               dtype=torch.float32, timed=False, timeout_s=300)
    assert [x.verdict for x in res] == [Verdict.LAUNCH_ERROR, Verdict.OK, Verdict.OK], [x.reason for x in res]
    assert "not a pointer" in res[0].reason
    for x in res[1:]:
        assert x.data["checked_elements"] == m * top_k * n and x.data["bad_elements"] == 0
        assert x.data["atol"] == bound.atol and x.data["tolerance"] == bound.text


def test_a_problem_whose_inputs_cannot_be_made_gives_each_config_a_launch_error_row(tmp_path):
    """The child ends before its first config (here: the inputs are asked for on a device that does not exist):
    every config of the problem gets a launch-error row naming why, and run_configs returns instead of retrying."""
    from tileprobe.backends.triton import isolated
    from tileprobe.backends.triton import runtime as rt
    from tileprobe.errors import UsageError
    from tileprobe.families import triton_moe as tm
    from tileprobe.families.base import Accumulation
    from tileprobe.results import tolerance
    from tileprobe.triton.sweep import engine_kernel_source
    from tileprobe.verdict import Verdict

    r = random.Random()
    engine = r.choice(["vllm", "sglang"])
    try:
        _, src = engine_kernel_source(engine, None)
    except UsageError as exc:
        pytest.skip(str(exc))
    entry = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 1, "num_warps": 4,
             "num_stages": r.choice([2, 3])}
    n_cfg = r.randint(1, 3)
    jobs = [tm.launch_job(engine, src, "bf16", "gate_up", 8, 64, 64, 2, 2, entry, 120)] * n_cfg
    p = rt.Problem(engine, "bf16", "gate_up", 8, 64, 64, 2, 2)
    res = isolated.run_configs(src, tmp_path, p, r.randrange(10**6), jobs,
                               [tolerance.derive(1e-2, 2e-2, 64, Accumulation())] * n_cfg, device="cuda:97",
                               timed=False, timeout_s=300)
    assert [x.verdict for x in res] == [Verdict.LAUNCH_ERROR] * n_cfg
    assert all("ended before its first config" in x.reason for x in res), res[0].reason
