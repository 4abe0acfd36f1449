"""On a GPU: tileprobe's no-GPU compile of a launch gives the same kernel as Triton's own launch of it (the binder's
specialisation reproduced), the same metadata.shared, and registers/spills equal to what Triton's driver reads
(n_regs, n_spills). The lent H200 has Triton 3.6.0: set TILEPROBE_ANY_TRITON=1 there (bytes are that release's)."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from tileprobe.backends.triton.compile import KernelJob, compile_job, jit_function  # noqa: E402
from tileprobe.backends.triton.source import extract, load  # noqa: E402
from tileprobe.backends.triton.toolchain import cache_root  # noqa: E402

from test_triton_backend import KERNEL_FILE  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.triton]


def test_no_gpu_compile_matches_the_launch(tmp_path):
    src = extract(KERNEL_FILE, "mm_kernel", "gpu test kernel")
    fn = jit_function(load(src, cache_root(tmp_path)))
    r = random.Random()
    m, n, k = r.choice([256, 512]), r.choice([256, 384]), r.choice([512, 1024])
    bm, bn, bk, stages = r.choice([64, 128]), r.choice([64, 128]), 64, r.choice([2, 3, 4])
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    grid = (triton_cdiv(m, bm), triton_cdiv(n, bn))
    compiled = fn[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=4, num_stages=stages)
    torch.cuda.synchronize()
    ref = (a.float() @ b.float()) * 2.0
    assert torch.allclose(c.float(), ref, atol=0.5, rtol=2e-2)  # the kernel ran (scale 2 in its epilogue)
    cc = torch.cuda.get_device_capability()
    job = KernelJob(src, ("*bf16", "*bf16", "*bf16", m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                          c.stride(0), c.stride(1)),
                    (("BLOCK_M", bm), ("BLOCK_N", bn), ("BLOCK_K", bk), ("num_warps", 4), ("num_stages", stages)),
                    cc[0] * 10 + cc[1])
    mine = compile_job(job, tmp_path)
    assert mine.shared == compiled.metadata.shared
    assert (mine.regs, mine.spills) == (compiled.n_regs, compiled.n_spills)
    assert mine.arch == compiled.metadata.arch


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
