"""check-configs / export share compiles across launches by replacing each non-constexpr int argument with its
specialisation class (tileprobe.triton.audit.canonical). Triton's own binder must see the two launches as the same
compile: equal signature, constexprs and attributes (what triton.compile gets), for real launches of both engines'
kernels on random problems. No compile: the binder only. Skipped without Triton or the engines.
"""

from __future__ import annotations

import pytest

from _engine_exec import engine_source_or_skip
from tileprobe.backends.triton import compile as tcomp
from tileprobe.backends.triton import source as tsrc
from tileprobe.families import triton_moe as tm
from tileprobe.triton.audit import canonical, constexpr_positions
from tileprobe.workloads import PRESETS


def _bound(job, tmp_path):
    """Triton's binder and _pack_args on the job's stand-ins, as tileprobe.backends.triton.compile runs them."""
    kernel = tsrc.load(job.source, tmp_path)
    fn = tcomp.jit_function(kernel)
    target = tcomp._backends.GPUTarget("cuda", job.cc, 32)
    backend = tcomp._compiler.make_backend(target)
    binder = tcomp._jit.create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = {k: tcomp.stand_in(v) for k, v in job.kwargs}
    kwargs.setdefault("debug", tcomp._knobs.runtime.debug)
    kwargs.setdefault("instrumentation_mode", tcomp._knobs.compilation.instrumentation_mode)
    bound, spec, options = binder(*[tcomp.stand_in(a) for a in job.args], **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
    return repr(signature), repr(sorted(constexprs.items(), key=repr)), repr(sorted(attrs.items(), key=repr)), \
        repr(sorted(options.__dict__.items()))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_canonical_launch_binds_like_the_real_one(engine, rng, tmp_path):
    src, ks = engine_source_or_skip(engine)
    consts = constexpr_positions(ks)
    for _ in range(12):
        model = rng.choice(list(PRESETS.values()))
        tp = rng.choice([t for t in (1, 2, 4, 8) if model.inter % t == 0])
        quant, gemm = rng.choice(tm.QUANTS), rng.choice(tm.GEMMS)
        entry = {"BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": rng.choice([64, 128]),
                 "BLOCK_SIZE_K": rng.choice([64, 128]), "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
        n, k = tm.gemm_shape(gemm, model.hidden, model.inter // tp)
        job = tm.launch_job(engine, ks, quant, gemm, model.experts, n, k, rng.randint(1, 5000), model.top_k, entry,
                            rng.choice([120, 90]))
        canon = canonical(job, consts)
        assert canon.args != job.args or all(not isinstance(a, int) or a in (1, 16, 17) for a in job.args)
        assert _bound(canon, tmp_path) == _bound(job, tmp_path), (model.name, tp, quant, gemm)
