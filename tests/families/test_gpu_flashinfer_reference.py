"""flashinfer-moe SM120 reference, checked against an independent numpy decode (marker `gpu`: the reference is a
CUDA kernel, so this runs on the lent H200 from an sm_90a build of the SM120 kernel types, `--reference-dump`).

The harness fills each operand as its own element type (e2m1 packed, e4m3 without NaN codes), scale factors as the
pair's type (ue4m3 per 16 for NVFP4, ue8m0 per 32 for MX) in the kernel's own SF layout, and computes the fp32
reference (gemm1: one group's D; gemm2 finalize: every token's routed sum). Here every byte is decoded from the
formats' definitions and the SF atoms from the layout's definition (128 rows x 4 SFs, K-first), never CUTLASS's code.
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tileprobe.backends.cutlass.build import BuildRequest, build_many
from tileprobe.errors import UsageError
from tileprobe.families import FAMILIES, Config, Tile
from tileprobe.sweep import make_toolchain

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]

E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=np.float64)


def decode_e2m1(raw: np.ndarray, count: int) -> np.ndarray:
    lo, hi = raw & 0xF, raw >> 4  # element 2i in the low nibble, 2i+1 in the high one
    return E2M1[np.stack([lo, hi], axis=-1).reshape(-1)[:count]]


def decode_e4m3(raw: np.ndarray) -> np.ndarray:
    """OCP e4m3 (fn): sign, 4 exponent bits (bias 7), 3 mantissa bits; S.1111.111 is NaN."""
    assert not np.any((raw & 0x7F) == 0x7F), "e4m3 NaN code in the operand data"
    s = np.where(raw & 0x80, -1.0, 1.0)
    e, m = ((raw >> 3) & 0xF).astype(np.int64), (raw & 7).astype(np.float64)
    return s * np.where(e > 0, np.ldexp(1 + m / 8, e - 7), np.ldexp(m / 8, -6))


def decode_ue4m3(raw: np.ndarray) -> np.ndarray:
    e, m = (raw >> 3).astype(np.int64), (raw & 7).astype(np.float64)
    return np.where(e > 0, np.ldexp(1 + m / 8, e - 7), np.ldexp(m / 8, -6))


def decode_ue8m0(raw: np.ndarray) -> np.ndarray:
    assert not np.any(raw == 0xFF), "ue8m0 NaN code in the scale factors"
    return np.ldexp(1.0, raw.astype(np.int64) - 127)


def sf_matrix(raw: np.ndarray, rows: int, k: int, vec: int, decode) -> np.ndarray:
    """Scale factors [rows, k/vec] from 128-row x 4-SF atoms of 512 bytes, tiles laid K-first."""
    sfk = k // vec
    tiles_k = -(-sfk // 4)
    assert raw.size == -(-rows // 128) * 128 * tiles_k * 4
    r = np.arange(rows)[:, None]
    c = np.arange(sfk)[None, :]
    off = ((r // 128) * tiles_k + c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
    return decode(raw[off])


@dataclass(frozen=True)
class Pair:
    dtypes: str
    act_bits: int
    vec: int
    tactic: str  # 128x128 tile, 128 K elements either way


PAIRS = {"nvfp4xnvfp4": Pair("nvfp4xnvfp4", 4, 16, "CtaShape128x128x64B"),
         "mxfp8xmxfp4": Pair("mxfp8xmxfp4", 8, 32, "CtaShape128x128x128B")}


def operand(raw: np.ndarray, rows: int, k: int, bits: int) -> np.ndarray:
    return (decode_e2m1(raw, rows * k) if bits == 4 else decode_e4m3(raw[: rows * k])).reshape(rows, k)


def dequant(d: Path, name: str, sfname: str, rows: int, k: int, bits: int, pair: Pair) -> np.ndarray:
    x = operand(np.fromfile(d / name, np.uint8), rows, k, bits)
    dec = decode_ue4m3 if pair.vec == 16 else decode_ue8m0
    sf = sf_matrix(np.fromfile(d / sfname, np.uint8), rows, k, pair.vec, dec)
    assert np.count_nonzero(x) > x.size // 2 and sf.min() > 0  # random data, not zeros
    return x * np.repeat(sf, pair.vec, axis=1)


class _RefDump(BuildRequest):
    """The SM120 kernel types built for the H200's sm_90a: only the reference path runs (PROTOCOL.md)."""

    @property
    def arch(self) -> str:
        return "sm_90a"


VARIANTS = [("nvfp4xnvfp4", "default", False), ("nvfp4xnvfp4", "default", True),
            ("nvfp4xnvfp4", "finalize", False), ("nvfp4xnvfp4", "finalize", True),
            ("mxfp8xmxfp4", "default", False), ("mxfp8xmxfp4", "default", True),
            ("mxfp8xmxfp4", "finalize", False), ("mxfp8xmxfp4", "finalize", True)]


def _config(dtypes: str, epilogue: str, swap: bool) -> Config:
    return Config("flashinfer-moe", Tile(128, 128, 128), "auto", 0, epilogue, swap, "sm_120a", (1, 1, 1),
                  (("dtypes", dtypes), ("tactic", PAIRS[dtypes].tactic)))


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    try:  # FlashInfer's own headers are the kernel: a GPU machine without them cannot run these (e.g. the lent H200)
        root = FAMILIES["flashinfer-moe"].cutlass_root()
    except UsageError as exc:
        pytest.skip(str(exc))
    tc = make_toolchain(root, None, str(tmp_path_factory.mktemp("fiwref")))
    res = build_many([_RefDump("run", (_config(*v),)) for v in VARIANTS], tc.cutlass, tc.nvcc, tc.cache, jobs=16,
                     timeout_s=1800)
    for r in res:
        assert r.ok, r.log[-3000:]
    return dict(zip(VARIANTS, res))


def _dump(binary: Path, tmp_path: Path, problems: list[tuple[int, int, int]], seed: int, extra=()) -> tuple[Path, dict]:
    pf = tmp_path / "problems.txt"
    pf.write_text("".join(f"{m} {n} {k}\n" for m, n, k in problems))
    out = tmp_path / "dump"
    p = subprocess.run([str(binary), "--problems", str(pf), "--seed", str(seed), "--reference-dump", str(out),
                        *extra], capture_output=True, text=True, timeout=300)
    line = json.loads(p.stdout.strip().splitlines()[-1])
    assert line["error"] is None, (line, p.stderr[-2000:])
    return out, json.loads((out / "meta.json").read_text())


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v[1] == "default"], ids=lambda v: f"{v[0]}-swap{v[2]}")
def test_gemm1_reference_matches_an_independent_decode(builds, tmp_path, variant):
    dtypes, _, swap = variant
    pair = PAIRS[dtypes]
    rng = random.Random()
    seed = rng.randrange(2**31)
    print(f"seed {seed}")
    rows, hidden, k = rng.randint(1, 200), 128 * rng.randint(1, 6), 128 * rng.randint(1, 8)
    m, n = (hidden, rows) if swap else (rows, hidden)  # swap-AB: the weights are A
    out, meta = _dump(builds[variant].binary, tmp_path, [(m, n, k)], seed)
    bits_a, bits_b = (4, pair.act_bits) if swap else (pair.act_bits, 4)
    assert (meta["M"], meta["N"], meta["K"], meta["bits_a"], meta["bits_b"], meta["sf_vector"]) == \
        (m, n, k, bits_a, bits_b, pair.vec)
    a = dequant(out, "A.bin", "SFA.bin", m, k, bits_a, pair)
    b = dequant(out, "B.bin", "SFB.bin", n, k, bits_b, pair)
    want = meta["alpha"] * (a @ b.T)
    got = np.fromfile(out / "D_ref.bin", np.float32).reshape(m, n)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-5, rel


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v[1] == "finalize"], ids=lambda v: f"{v[0]}-swap{v[2]}")
def test_finalize_reference_matches_an_independent_routed_sum(builds, tmp_path, variant):
    """Every expert's operands decoded here, each expanded row's partial scaled by its router scale and summed into
    the token that row_index % tokens names (the engine's rule), compared with the harness's position-order output."""
    dtypes, _, swap = variant
    pair = PAIRS[dtypes]
    rng = random.Random()
    seed = rng.randrange(2**31)
    print(f"seed {seed}")
    groups, hidden, k, topk = rng.randint(2, 6), 128 * rng.randint(1, 4), 128 * rng.randint(1, 4), rng.randint(1, 4)
    rows = [rng.randint(1, 40) for _ in range(groups)]
    probs = [(hidden, r, k) if swap else (r, hidden, k) for r in rows]
    out, meta = _dump(builds[variant].binary, tmp_path, probs, seed, ["--topk", str(topk)])
    assert meta["rows_per_group"] == rows and meta["hidden"] == hidden and meta["swap_ab"] == swap
    tokens = meta["tokens"]
    row_index = np.fromfile(out / "row_index.bin", np.int32)
    row_scale = np.fromfile(out / "row_scale.bin", np.float32).astype(np.float64)
    order = np.fromfile(out / "order.bin", np.int32)
    alpha = np.fromfile(out / "alpha.bin", np.float32).astype(np.float64)
    assert row_index.size == sum(rows) and order.size == tokens and sorted(order) == list(range(tokens))
    act_bits = pair.act_bits
    by_token = np.zeros((tokens, hidden))
    i0 = 0
    for g, r in enumerate(rows):
        m, n = probs[g][0], probs[g][1]
        bits_a, bits_b = (4, act_bits) if swap else (act_bits, 4)
        a = dequant(out, f"A_{g}.bin", f"SFA_{g}.bin", m, k, bits_a, pair)
        b = dequant(out, f"B_{g}.bin", f"SFB_{g}.bin", n, k, bits_b, pair)
        partial = alpha[g] * (a @ b.T)  # M x N
        partial = partial.T if swap else partial  # rows x hidden
        for local in range(r):
            i = i0 + local
            by_token[row_index[i] % tokens] += row_scale[i] * partial[local]
        i0 += r
    got = np.fromfile(out / "F_ref.bin", np.float32).reshape(tokens, hidden)
    want = by_token[order]
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-5, rel
