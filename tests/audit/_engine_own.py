"""What the audit tests that compile share (the engine wheels are tests/audit/conftest.py's fixtures): an entry's
launches as its engine's own launcher makes them under the stand-in device; the independent reading every bytes
test compares against, Triton's own `metadata.shared` for the engine's own kernel objects (imported from the wheel
in the session), compiled by Triton's own binder and triton.compile on the arguments the launcher really passes
(no extract, no stand-in strings); tileprobe's answer for a captured launch as the audit gives it by default
(`answered`: Triton's allocation alone, tileprobe.backends.triton.allocate, where the installed Triton is the one its
prefix was checked on), so those tests hold the capture and the sizing against Triton's own whole compile at once;
and SGLang's extend-attention block sizes as its branch text says them."""

from __future__ import annotations

import ast

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import JITFunction, create_function_from_signature

from tileprobe.audit import capture
from tileprobe.backends.triton import allocate
from tileprobe.backends.triton.compile import KernelJob, compile_job

# the device test of each target's branch in SGLang's _get_block_sizes_for_extend_attention
EXTEND_BRANCH = {"rtx-pro-6000": "CUDA_CAPABILITY[0] == 12", "h200": "CUDA_CAPABILITY[0] >= 9"}


def answered(job: KernelJob, **kwargs) -> int:
    """metadata.shared of `job` as the audit answers it by default (sized), or compiled where sizing is not
    available; a compile error is an assertion with its line."""
    build = compile_job(job if allocate.unavailable() else job.sized(), **kwargs)
    assert hasattr(build, "shared"), build
    return build.shared


def call_launcher(session, entry, model, point) -> None:
    """The entry's launcher, imported in `session`, called with the entry's arguments for `model` at `point` (or the
    engine's own call site the entry drives)."""
    if entry.drive is not None:
        entry.drive(session, model, point)
        return
    args, kwargs = entry.arguments(model, point)
    getattr(session.module(entry.module), entry.launcher)(*args, **kwargs)


def captured(src, target, entry, model, point) -> list:
    """The launches the entry's launcher makes for `model` at `point` on `target`."""
    with capture.engine_session(src, target, entry.allow, entry.stand_ins) as s:
        call_launcher(s, entry, model, point)
    return s.launches


def tritons_own(src, target, entry, model, point, tmp_path, monkeypatch, keep=None, values=None) -> list:
    """(kernel, autotune index or None, metadata.shared) of each launch the entry's launcher makes, in order, each
    compiled by Triton itself from the engine's own kernel object (an autotuned kernel: once per config the session's
    Autotuner.run tries). `keep(kernel, autotune index)`: which launches to compile (default all); `values`: put over
    the launch's arguments (a variant of it, launched by the same launcher)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    got = []
    with capture.engine_session(src, target, entry.allow, entry.stand_ins) as s:
        def compile_run(fn, *args, grid, warmup, **kwargs):
            tuned = s._autotune[0] if s._autotune else None
            if keep is not None and not keep(fn.__name__, tuned):
                return
            named = {**dict(zip(fn.arg_names, args)), **kwargs, **(values or {})}
            kwargs = {"debug": False, "instrumentation_mode": "", **named}
            gpu = GPUTarget("cuda", target.cc_int, 32)
            backend = make_backend(gpu)
            bound, spec, options = create_function_from_signature(fn.signature, fn.params, backend)(**kwargs)
            options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, spec, options)
            got.append((fn.__name__, tuned, triton.compile(ASTSource(fn, signature, constexprs, attrs), target=gpu,
                                                           options=options.__dict__).metadata.shared))

        with monkeypatch.context() as m:
            m.setattr(JITFunction, "run", compile_run)
            call_launcher(s, entry, model, point)
    return got


def extend_blocks(text: str, branch: str, lq: int) -> tuple[int, tuple[int, int]]:
    """The line of `if ... <branch>:` in _get_block_sizes_for_extend_attention and the (BLOCK_M, BLOCK_N) its body
    assigns for head size lq (its nested `if Lq <= ...` chain evaluated on lq)."""
    fn = next(n for n in ast.parse(text).body
              if isinstance(n, ast.FunctionDef) and n.name == "_get_block_sizes_for_extend_attention")
    node = next(n for n in ast.walk(fn) if isinstance(n, ast.If) and branch in ast.unparse(n.test))
    body = node.body
    while True:
        stmt = next(s for s in body if isinstance(s, (ast.If, ast.Assign)))
        if isinstance(stmt, ast.Assign):
            return node.lineno, tuple(ast.literal_eval(stmt.value))
        body = stmt.body if eval(ast.unparse(stmt.test), {"Lq": lq, "Lv": lq}) else stmt.orelse  # noqa: S307
