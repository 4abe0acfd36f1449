"""The runtime harness's operand decoders (cutlass_harness/decode.cuh), compiled by the real nvcc and run on the host,
against an independent decoding of every code: torch's own float8_e4m3fn and float8_e8m0fnu dtypes (the unsigned
ue4m3 scale is e4m3 with the sign bit clear) and the OCP MX specification's table of the eight e2m1 magnitudes. The
reference GEMM decodes every operand element through these functions, so a wrong code would be a wrong reference."""

import shutil
import struct
import subprocess

import pytest

from tileprobe.backends.cutlass.build import HARNESS_DIR

torch = pytest.importorskip("torch", reason="torch is the independent decoding here (the test extra installs it)")

DUMP = r"""#include <cstdio>
#include "decode.cuh"
int main() {
  for (int b = 0; b < 256; ++b) {
    float v[4] = {decode_e4m3(uint8_t(b)), decode_ue4m3(uint8_t(b)), decode_ue8m0(uint8_t(b)), decode_e2m1(uint8_t(b & 15))};
    unsigned u[4];
    for (int i = 0; i < 4; ++i) std::memcpy(&u[i], &v[i], 4);
    std::printf("%d %08x %08x %08x %08x\n", b, u[0], u[1], u[2], u[3]);
  }
}
"""

E2M1_MAGNITUDES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # OCP Microscaling Formats v1.0, table 5 (FP4 E2M1)


def _f(bits: str) -> float:
    return struct.unpack("<f", bytes.fromhex(bits)[::-1])[0]


def _same(ours: float, theirs: float) -> bool:
    return (ours != ours and theirs != theirs) or struct.pack("<f", ours) == struct.pack("<f", theirs)


@pytest.mark.nvcc
def test_every_code_of_every_format_decodes_to_its_value(tmp_path):
    nvcc = shutil.which("nvcc")
    assert nvcc, "nvcc must be on PATH for these tests"
    src = tmp_path / "decode_dump.cu"
    src.write_text(DUMP)
    exe = tmp_path / "decode_dump"
    p = subprocess.run([nvcc, "-std=c++17", "-I", str(HARNESS_DIR), str(src), "-o", str(exe)], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=True).stdout.split("\n")
    rows = [line.split() for line in out if line]
    assert [int(r[0]) for r in rows] == list(range(256))
    codes = torch.arange(256, dtype=torch.uint8)
    e4m3 = codes.view(torch.float8_e4m3fn).float().tolist()
    ue4m3 = (codes & 0x7F).view(torch.float8_e4m3fn).float().tolist()
    ue8m0 = codes.view(torch.float8_e8m0fnu).float().tolist()
    bad = []
    for b, (_, h_e4m3, h_ue4m3, h_ue8m0, h_e2m1) in enumerate(rows):
        nib = b & 15
        e2m1 = (-1.0 if nib & 8 else 1.0) * E2M1_MAGNITUDES[nib & 7]
        for name, ours, theirs in (("e4m3", h_e4m3, e4m3[b]), ("ue4m3", h_ue4m3, ue4m3[b]),
                                   ("ue8m0", h_ue8m0, ue8m0[b]), ("e2m1", h_e2m1, e2m1)):
            if not _same(_f(ours), theirs):
                bad.append(f"{name} code 0x{b:02x}: harness {_f(ours)!r}, expected {theirs!r}")
    assert not bad, "\n".join(bad[:20])
