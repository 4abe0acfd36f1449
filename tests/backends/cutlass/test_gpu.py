"""GPU tests (marker `gpu`, skipped without a GPU). Proven on the lent H200 (sm_90)."""

import json
import random

import numpy as np
import pytest

import os
import shutil
import subprocess

from tileprobe.backends.cutlass.build import BuildRequest, build_many, kernel_cubin
from tileprobe.results.classify import ProbeResult, classify
from tileprobe.backends.cutlass.runner import Answer, run_points
from tileprobe.families import FAMILIES, Config, parse_tile
from tileprobe.verdict import Verdict

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def _cfg(family, tile, arch, stages=0, schedule="cooperative"):
    return Config(family, parse_tile(tile, FAMILIES[family].ab_bits), schedule, stages, "no-c", False, arch)


@pytest.fixture(scope="module")
def builds(toolchain):
    cfgs = {
        "nvfp4_ref_sm90": _cfg("sm120-nvfp4", "128x128x128", "sm_90a"),  # reference path only, built for the H200
        "nvfp4_sm120": _cfg("sm120-nvfp4", "128x128x128", "sm_120a"),
        "fp8_overfull": _cfg("sm90-fp8", "256x256x128", "sm_90a", stages=4),
        "fp8_ok": _cfg("sm90-fp8", "128x128x128", "sm_90a"),
    }
    pair = (cfgs["fp8_ok"], _cfg("sm90-fp8", "64x256x128", "sm_90a", schedule="pingpong"))  # one host half, two kernels
    res = build_many([BuildRequest("run", (c,)) for c in cfgs.values()] + [BuildRequest("run", pair)],
                     toolchain.cutlass, toolchain.nvcc, toolchain.cache, jobs=4, timeout_s=1800)
    for r in res:
        assert r.ok, r.log[-2000:]
    return dict(zip([*cfgs, "fp8_pair"], res))


def run_one(cmd: list[str], timeout: float = 120, fault: str | None = None) -> ProbeResult:
    """The verdict of the first point a real harness answers (with TILEPROBE_FAULT set when `fault` is)."""
    env = dict(os.environ, TILEPROBE_FAULT=fault) if fault else None
    for ev in run_points(cmd, timeout, env):
        if isinstance(ev, Answer):
            return classify(ev.data)
    raise AssertionError(f"no answer from {cmd}")


def _problems(tmp_path, probs):
    p = tmp_path / "problems.txt"
    p.write_text("".join(f"{m} {n} {k}\n" for m, n, k in probs))
    return p


E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def decode_e2m1(raw: np.ndarray, count: int) -> np.ndarray:
    lo, hi = raw & 0xF, raw >> 4  # element 2i in the low nibble, 2i+1 in the high one
    return E2M1[np.stack([lo, hi], axis=-1).reshape(-1)[:count]]


def decode_ue4m3(raw: np.ndarray) -> np.ndarray:
    e, m = (raw >> 3).astype(np.int64), (raw & 7).astype(np.float64)
    return np.where(e > 0, np.ldexp(1 + m / 8, e - 7), np.ldexp(m / 8, -6))


def sf_matrix(raw: np.ndarray, rows: int, k: int) -> np.ndarray:
    """Scale factors [rows, k/16] from the 128-row x 4-SF swizzled atoms, tiles laid K-first (written here from the
    layout's definition, independently of CUTLASS's code)."""
    sfk = k // 16
    tiles_k = -(-sfk // 4)
    r = np.arange(rows)[:, None]
    c = np.arange(sfk)[None, :]
    off = ((r // 128) * tiles_k + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    return decode_ue4m3(raw[off])


def test_nvfp4_reference_matches_an_independent_dequantize_and_matmul(builds, tmp_path):
    import torch

    rng = random.Random()
    m, n, k = rng.randint(1, 300), 8 * rng.randint(1, 40), 64 * rng.randint(1, 12)
    alpha = rng.uniform(0.25, 2.0)
    out = tmp_path / "dump"
    p = subprocess.run([str(builds["nvfp4_ref_sm90"].binary), "--problems", str(_problems(tmp_path, [(m, n, k)])),
                        "--seed", str(rng.randrange(2**31)), "--alpha", repr(alpha), "--reference-dump", str(out)],
                       capture_output=True, text=True, timeout=120)
    meta = json.loads((out / "meta.json").read_text())
    assert (meta["M"], meta["N"], meta["K"]) == (m, n, k), p
    a = decode_e2m1(np.fromfile(out / "A.bin", np.uint8), m * k).reshape(m, k)
    b = decode_e2m1(np.fromfile(out / "B.bin", np.uint8), n * k).reshape(n, k)
    sfa_raw, sfb_raw = np.fromfile(out / "SFA.bin", np.uint8), np.fromfile(out / "SFB.bin", np.uint8)
    assert sfa_raw.size == -(-m // 128) * 128 * -(-(k // 16) // 4) * 4
    sfa, sfb = sf_matrix(sfa_raw, m, k), sf_matrix(sfb_raw, n, k)
    assert np.count_nonzero(a) > a.size // 2 and sfa.min() > 0  # random, not zeros
    a_deq = torch.tensor(a * np.repeat(sfa, 16, axis=1), dtype=torch.float64, device="cuda")
    b_deq = torch.tensor(b * np.repeat(sfb, 16, axis=1), dtype=torch.float64, device="cuda")
    want = (meta["alpha"] * (a_deq @ b_deq.T)).cpu().numpy()
    got = np.fromfile(out / "D_ref.bin", np.float32).reshape(m, n)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-5, rel


def test_sm120a_binary_is_not_runnable_on_this_gpu(builds, tmp_path):
    r = run_one([str(builds["nvfp4_sm120"].binary), "--problems",
                             str(_problems(tmp_path, [(16, 256, 256)]))], 120)
    assert r.verdict is Verdict.NOT_RUNNABLE_HERE, r
    assert "sm_120a" in r.reason and "sm_90" in r.reason


def test_overfull_stage_count_fails_at_initialize_with_bytes(builds, tmp_path):
    r = run_one([str(builds["fp8_overfull"].binary), "--problems",
                             str(_problems(tmp_path, [(64, 512, 1024)] * 3))], 120)
    assert r.verdict is Verdict.LAUNCH_ERROR, r
    assert r.data["steps"]["can_implement"]["status"] == "kSuccess"
    assert r.data["smem_bytes"] == 280576 and r.data["smem_optin"] == 232448
    assert "initialize: kErrorInternal" in r.reason and "MaxDynamicSharedMemorySize=280576" in r.reason
    assert "232448" in r.reason


def test_a_harness_without_its_own_kernel_fails_at_initialize_and_says_which_file(builds, tmp_path):
    """The harness launches only the kernel.0.cubin beside it, and only if it is its config's kernel: with none, or with
    another config's cubin in its place, the point fails at initialize and names the file; nothing is launched."""
    problems = str(_problems(tmp_path, [(64, 512, 1024)]))
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy2(builds["fp8_ok"].binary, alone / "harness")
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy2(builds["fp8_ok"].binary, other / "harness")
    shutil.copy2(builds["fp8_overfull"].binary.parent / kernel_cubin(0), other / kernel_cubin(0))
    for folder, said in ((alone, "cudaLibraryLoadFromFile"), (other, "holds config")):
        r = run_one([str(folder / "harness"), "--problems", problems], 120)
        assert r.verdict is Verdict.LAUNCH_ERROR, (folder.name, r)
        assert r.data["steps"]["can_implement"]["status"] == "kSuccess"
        assert r.data["steps"]["initialize"]["status"] == "kErrorInternal" and "run" not in r.data["steps"]
        assert "initialize: kErrorInternal" in r.reason and said in r.reason and str(folder) in r.reason, r.reason
    # and beside its own cubin the same binary runs, and computes right
    shutil.copy2(builds["fp8_ok"].binary.parent / kernel_cubin(0), alone / kernel_cubin(0))
    fam = FAMILIES["sm90-fp8"]
    r = run_one([str(alone / "harness"), "--problems", problems, "--atol", repr(fam.atol), "--rtol", repr(fam.rtol)],
                120)
    assert r.verdict is Verdict.OK and r.data["bad_elements"] == 0, r


def test_a_harness_of_two_configs_runs_each_with_its_own_kernel(builds, tmp_path):
    """One host half serving two configs (build.harness_batches' layout): --config-index picks the config, its
    kernel.<i>.cubin and its sizes; each computes right on random shapes, with the bytes its own single harness
    describes, and a cubin swapped into the other's place is refused."""
    rng = random.Random()
    pair, fam = builds["fp8_pair"], FAMILIES["sm90-fp8"]
    probs = [(rng.randint(1, 200), 16 * rng.randint(1, 64), 16 * rng.randint(1, 64)) for _ in range(rng.randint(1, 6))]
    problems = str(_problems(tmp_path, probs))
    single = json.loads(subprocess.run([str(builds["fp8_ok"].binary), "--describe"], capture_output=True, text=True,
                                       timeout=60).stdout)
    seen = []
    for i in rng.sample([0, 1], 2):
        desc = json.loads(subprocess.run([str(pair.binary), "--describe", "--config-index", str(i)],
                                         capture_output=True, text=True, timeout=60).stdout)
        assert desc["index"] == i
        r = run_one([str(pair.binary), "--config-index", str(i), "--problems", problems, "--seed",
                     str(rng.randrange(2**31)), "--atol", repr(fam.atol), "--rtol", repr(fam.rtol)], 120)
        assert r.verdict is Verdict.OK and r.data["bad_elements"] == 0, (i, probs, r)
        assert r.data["index"] == i and r.data["smem_bytes"] == desc["smem_bytes"]
        seen.append((i, desc))
    descs = dict(seen)
    assert descs[0] == single and descs[0]["kernel_type"] != descs[1]["kernel_type"]
    swapped = tmp_path / "swapped"
    shutil.copytree(pair.binary.parent, swapped)
    shutil.copy2(swapped / kernel_cubin(1), swapped / kernel_cubin(0))
    r = run_one([str(swapped / "harness"), "--config-index", "0", "--problems", problems], 120)
    assert r.verdict is Verdict.LAUNCH_ERROR and "holds config" in r.reason, r


def test_fp8_grouped_gemm_is_correct_on_random_shapes(builds, tmp_path):
    rng = random.Random()
    probs = [(rng.randint(1, 200), 16 * rng.randint(1, 64), 16 * rng.randint(1, 64)) for _ in range(rng.randint(1, 9))]
    fam = FAMILIES["sm90-fp8"]
    r = run_one([str(builds["fp8_ok"].binary), "--problems", str(_problems(tmp_path, probs)),
                 "--seed", str(rng.randrange(2**31)), "--atol", repr(fam.atol), "--rtol", repr(fam.rtol)], 120)
    assert r.verdict is Verdict.OK, (probs, r)
    assert r.data["nonfinite"] == 0 and 0 < r.data["rel_err"] < 1e-2 and r.data["groups"] == len(probs)
    assert r.data["bad_elements"] == 0 and r.data["checked_elements"] == sum(m * n for m, n, _ in probs)
    assert len(r.data["us"]) >= 1 and min(r.data["us"]) > 0 and r.data["l2_bytes"] > 0


def test_one_corrupted_tile_among_many_groups_is_incorrect_and_named(builds, tmp_path):
    """64x128 wrong outputs in one group of 64: the pooled norm hardly moves, the element-wise check names it."""
    rng = random.Random()
    probs = [(rng.randint(64, 128), 128 * rng.randint(1, 4), 512) for _ in range(64)]
    g = rng.randrange(64)
    fam = FAMILIES["sm90-fp8"]
    cmd = [str(builds["fp8_ok"].binary), "--problems", str(_problems(tmp_path, probs)), "--seed",
           str(rng.randrange(2**31)), "--atol", repr(fam.atol), "--rtol", repr(fam.rtol)]
    assert run_one(cmd).verdict is Verdict.OK
    r = run_one(cmd, fault=f"corrupt:0:{g}")
    assert r.verdict is Verdict.INCORRECT, r
    assert r.data["bad_groups"] == 1 and r.data["worst_group"] == g and f"worst in group {g} " in r.reason
    assert r.data["worst_row"] < 64 and r.data["worst_col"] < 128


def _settled(samples: list[float], tol: float) -> bool:
    """The stated rule, read from PROTOCOL.md: one more sample could move the median by at most tol x median."""
    v = sorted(samples)
    n, m = len(v), len(v) // 2
    med = v[m] if n % 2 else (v[m - 1] + v[m]) / 2
    move = max(v[m] - v[m - 1], v[m + 1] - v[m]) / 2 if n % 2 else (v[m] - v[m - 1]) / 2
    return move <= tol * med


def test_timing_repeats_stop_where_one_more_could_not_move_the_median(builds, tmp_path):
    """With the sweep's own timing options: at least MIN_REPEATS and at most MAX_REPEATS samples, plain and graph
    each; a series that stopped early is settled, and a series that went past the minimum was not settled one
    sample earlier (samples are in the order measured)."""
    from tileprobe.backends.cutlass.timing import MAX_REPEATS, MEDIAN_TOL, MIN_REPEATS, harness_options

    rng = random.Random()
    cfg = _cfg("sm90-fp8", "128x128x128", "sm_90a")
    probs = [(rng.randint(1, 64), 128 * rng.randint(4, 32), 128 * rng.randint(4, 56)) for _ in range(rng.randint(1, 16))]
    r = run_one([str(builds["fp8_ok"].binary), "--problems", str(_problems(tmp_path, probs)),
                 *harness_options(cfg, rng.randrange(2**31))], 120)
    assert r.verdict is Verdict.OK, (probs, r)
    for series in (r.data["us"], r.data["us_graph"]):
        assert MIN_REPEATS <= len(series) <= MAX_REPEATS and min(series) > 0
        if len(series) < MAX_REPEATS:
            assert _settled(series, MEDIAN_TOL), series
        if len(series) > MIN_REPEATS:
            assert not _settled(series[:-1], MEDIAN_TOL), series
