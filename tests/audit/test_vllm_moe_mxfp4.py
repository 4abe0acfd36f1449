"""tileprobe.audit.entries.vllm_moe_mxfp4: vLLM's own triton_kernel_moe_forward (gpt-oss MXFP4, the TRITON backend),
run from the wheel with the vendored triton_kernels served as the top-level `triton_kernels` (capture.Alias), launches
the routing kernels and matmul_ogs with the opt_flags triton_kernels' own code computes from the stand-in device. Each
captured launch's bytes are compared with Triton's own compile of the engine's kernel object (matmul_ogs' kernels are
built at run time by triton_kernels' `specialize`) on the launcher's real arguments; the oracle's choice per target and
the forced --moe-backend path are read against the oracle's text. Random token counts, tensor parallelism and target
each run."""

from __future__ import annotations

import ast
import inspect
import sys

import pytest
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from _engine_own import answered

from tileprobe.audit import capture, jobs, kernels, loader
from tileprobe.audit import vllm_ogs_stand_ins as stand_ins
from tileprobe.audit.entries import vllm_moe_mxfp4
from tileprobe.errors import UsageError
from tileprobe.models import attention_model
from tileprobe.targets import profile

pytestmark = pytest.mark.triton

DECODE = kernels.KERNELS["vllm-moe-mxfp4-decode"]
SM120 = ("rtx-pro-6000", "rtx-5090")


def _point(rng):
    tokens = rng.choice([rng.randint(1, 64), rng.randint(65, 4096)])
    return kernels.Point(tokens, 1, rng.choice([1, 2, 4, 8]))


def _triton_own_shared(src, target, model, point, tmp_path, monkeypatch) -> list[int]:
    """metadata.shared of each launched kernel object (the engine's, as its code built it), compiled by Triton's own
    binder and triton.compile on the launcher's real arguments, in launch order (inside the session: Triton's
    target queries answer the target there)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    got = []

    def compile_run(fn, *args, grid, warmup, **kwargs):
        gpu = GPUTarget("cuda", target.cc_int, 32)
        backend = make_backend(gpu)
        kwargs = {"debug": False, "instrumentation_mode": "", **kwargs}
        bound, spec, options = create_function_from_signature(fn.signature, fn.params, backend)(*args, **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
        got.append(triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu,
                                  options=options.__dict__).metadata.shared)

    with capture.engine_session(src, target, DECODE.allow, DECODE.stand_ins) as s:
        launcher = getattr(s.module(DECODE.module), DECODE.launcher)
        monkeypatch.setattr(JITFunction, "run", compile_run)
        args, kwargs = DECODE.arguments(model, point)
        launcher(*args, **kwargs)
        monkeypatch.undo()
    return got


def _capture(src, target, model, point):
    with capture.engine_session(src, target, DECODE.allow, DECODE.stand_ins) as s:
        launcher = getattr(s.module(DECODE.module), DECODE.launcher)
        args, kwargs = DECODE.arguments(model, point)
        launcher(*args, **kwargs)
        return s.launches


def test_captured_matmul_ogs_bytes_are_tritons_own(vllm, rng, tmp_path, monkeypatch):
    target = profile(rng.choice(["h200", *SM120]))
    model = attention_model("gpt-oss-120b")
    pt = _point(rng)
    launches = _capture(vllm, target, model, pt)
    assert any("matmul_ogs" in la.kernel for la in launches)
    cut = lambda s, la: loader.module_source(DECODE, s, target, la.kernel)  # noqa: E731
    ours = [answered(jobs.job_of(vllm, la, target.cc_int, cut), cache_dir=tmp_path / "c")
            for la in launches]
    assert ours == _triton_own_shared(vllm, target, model, pt, tmp_path, monkeypatch), (target.name, pt)


def test_opt_flags_follow_the_device_and_the_engines_sm12x_pin(vllm, rng):
    """On a family-120 target the matmul_ogs launches are the persistent kernel (the engine's _swizzle_mxfp4 sets
    is_persistent) with the block_m the engine's own _sm12x_block_m gives for M * topk rows; on sm_90 the
    non-persistent kernel (matmul_ogs: no TMA for mxfp4 weights below capability 10) with split_k 1 (the engine's
    Hopper constraint). The line that decided is among the launch's recorded branches."""
    name = rng.choice(["h200", *SM120])
    target, model, pt = profile(name), attention_model("gpt-oss-120b"), _point(rng)
    with capture.engine_session(vllm, target, DECODE.allow, DECODE.stand_ins) as s:
        module = s.module(DECODE.module)
        args, kwargs = DECODE.arguments(model, pt)
        module.triton_kernel_moe_forward(*args, **kwargs)
        pinned = module._sm12x_block_m(pt.batch * model.moe.top_k, model.moe.experts)
        launches = [la for la in s.launches if "._matmul_ogs" in la.kernel or "._p_matmul_ogs" in la.kernel]
    assert len(launches) == 2
    # _constrain_sm12x_block_m's early return (`if not _is_sm12x(): return`) ran before the first GEMM off family 120
    assert any("if not _is_sm12x():" in b for b in launches[0].branches) == (name not in SM120)
    for la in launches:
        tma = next(b for b in la.branches if "get_device_capability()[0] > 9" in b)
        if name in SM120:
            assert la.kernel.endswith("._p_matmul_ogs") and la.arg("BLOCK_M") == pinned
            assert la.arg("EPILOGUE_SUBTILE") == 1 and la.grid[0] <= target.sms and tma.endswith("-> True")
        else:
            assert la.kernel.endswith("._matmul_ogs") and la.arg("SPLIT_K") == 1 and tma.endswith("-> False")


def test_the_alias_is_the_vendored_package_and_goes_with_the_session(vllm):
    """`triton_kernels.*` loads from the wheel's vllm/third_party/triton_kernels files under the alias name (so
    inspect.getsource and Triton's JIT read the engine's text), a name the package lacks is an ImportError, and the
    session leaves no triton_kernels module behind."""
    with capture.engine_session(vllm, profile("h200"), DECODE.allow, DECODE.stand_ins) as s:
        ogs = s.module("triton_kernels.matmul_ogs")
        assert ogs.__file__.endswith("vllm/third_party/triton_kernels/matmul_ogs.py")
        assert inspect.getsource(ogs.matmul_ogs) in vllm.read_text("vllm/third_party/triton_kernels/matmul_ogs.py")
        assert s.module("vllm.utils.import_utils").get_triton_kernels_version() == "3.5.1"
        with pytest.raises(ImportError):
            s.module("triton_kernels.not_shipped_here")
    assert not any(n == "triton_kernels" or n.startswith("triton_kernels.") for n in sys.modules)
    assert isinstance(stand_ins.STAND_INS["triton_kernels"], capture.Alias)


def test_sm120_default_is_the_oracles_family_120_move_and_forcing_triton_runs_the_launcher(vllm, rng, monkeypatch):
    """Default: an Elsewhere at the oracle's family-120 test. --moe-backend triton: the engine's own
    explicit branch (`runner_backend != 'auto'`, read here) accepts TRITON on the target, so chooses says None."""
    target = profile(rng.choice(SM120))
    model = attention_model("gpt-oss-120b")
    with capture.engine_session(vllm, target, DECODE.allow, DECODE.stand_ins) as s:
        default = DECODE.chooses(s, model, _point(rng))
        s.flags[vllm_moe_mxfp4.FLAG] = "triton"
        forced = DECODE.chooses(s, model, _point(rng))
        m = vllm_moe_mxfp4.choose_backend(vllm, "triton")
        s.flags[vllm_moe_mxfp4.FLAG] = "marlin"
        other = DECODE.chooses(s, model, _point(rng))
        s.flags[vllm_moe_mxfp4.FLAG] = "no-such-backend"
        with pytest.raises(UsageError):
            DECODE.chooses(s, model, _point(rng))
    assert default is not None and default.runs.startswith("MARLIN")
    assert forced is None and m.choice.backend == "TRITON" and m.choice.order == ("TRITON",)
    text = vllm.read_text(vllm_moe_mxfp4.ORACLE).splitlines()
    assert "if runner_backend != \"auto\":" in text[m.choice.walk_line - 1]
    assert other is not None and other.runs.startswith("MARLIN") and "moe_backend='marlin'" in other.why


def test_sizes_are_the_engines_rounding(vllm, rng):
    """The intermediate size per rank the entry sizes is the engine's TRITON rounding (a multiple of 64 on CUDA, at
    least inter / tp): read from the oracle's text, the else branch of
    mxfp4_round_up_hidden_size_and_intermediate_size."""
    model = attention_model("gpt-oss-120b")
    tp = rng.choice([1, 2, 4, 8])
    with capture.engine_session(vllm, profile(rng.choice(["h200", *SM120])), DECODE.allow, DECODE.stand_ins):
        hidden, n = vllm_moe_mxfp4.sizes(vllm, model, tp)
    tree = ast.parse(vllm.read_text(vllm_moe_mxfp4.ORACLE))
    fn = next(f for f in tree.body if isinstance(f, ast.FunctionDef)
              and f.name == "mxfp4_round_up_hidden_size_and_intermediate_size")
    last = [n for n in fn.body if isinstance(n, ast.If)][-1]  # the if/elif chain over the backends
    while isinstance(last, ast.If) and last.orelse and isinstance(last.orelse[0], ast.If):
        last = last.orelse[0]
    step = int(ast.unparse(last.orelse[0].value.args[1]))
    assert hidden == model.moe.hidden and n % step == 0 and model.moe.inter // tp <= n < model.moe.inter // tp + step
