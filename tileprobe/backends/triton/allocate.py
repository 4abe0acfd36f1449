"""Triton's own shared-memory allocation without code generation: a launch's metadata.shared read where Triton
decides it, before LLVM, PTX and ptxas (evidence `sized`: the kernel lowered for the arch on the host, sizes read,
no device code built; the CUTLASS word for sizeof(SharedStorage)).

What `triton.compile` does for a CUDA target, step by step: the frontend (ast to TTIR), the backend's `ttir` and
`ttgir` stages as its own `add_stages` lists them (pipelining, layouts, the arch's MMA), then `make_llir`, whose first
passes end with `add_allocate_shared_memory_nv`; `make_llir` then reads `metadata["shared"] =
mod.get_int_attr("ttg.shared")`, the number the launch compares with the opt-in limit. Everything after the
allocation (to-LLVM, LLVM's optimizer, PTX, ptxas) places what was allocated, and costs about four fifths of a
compile. `shared_bytes` runs the stages as Triton does and `make_llir`'s passes up to the allocation, copied here.

The copy is exact only for the `make_llir` it was taken from, so it is keyed: `CHECKED` holds, per Triton release,
the sha256 of `make_llir`'s source up to and including the allocation line. Another release or a changed
`make_llir` raises CannotSize (the caller compiles instead), as does an instrumented build (its passes change the
allocation). The tests compare `sized` with the full compile on launches drawn at random each run.

Triton 3.9.0's make_llir adds passes before the allocation only under an instrumentation mode (the global sanitizer
under 'gsan'; under 'consan' the warp-group allocation's flag and a capture pass: `triton._instrumentation.is_enabled`
reads them from `instrumentation_mode`). Without one, its prefix runs the same passes as 3.8.0's, so the copy below is
its prefix too, and it is keyed; a launch with an instrumentation mode is refused on either release (CannotSize).
tests/backends/triton/test_allocate.py holds the copy to 3.9.0's full compile where 3.9.0 is installed.
"""

from __future__ import annotations

import hashlib
import inspect

from tileprobe.errors import TileprobeError
from tileprobe.lazy import LazyModule

_triton = LazyModule("triton")
_compiler = LazyModule("triton.compiler.compiler")
_nv = LazyModule("triton.backends.nvidia.compiler")
_libtriton = LazyModule("triton._C.libtriton")

ALLOCATION_LINE = "add_allocate_shared_memory_nv"
# Triton release -> sha256 of CUDABackend.make_llir's source up to and including the allocation line (prefix_hash)
CHECKED = {
    "3.8.0": "4b529feedc2e0ec6e86871a2d89fa206e9bafc3ce5d840ae36b0908ab2bae59f",
    "3.9.0": "94794c2fafe3585d73811703ea1a6b3904753b2405a7de5c03c5021058a20657",  # gsan / consan gated: see above
}


class CannotSize(TileprobeError):
    """Triton's allocation cannot be run alone here (another release, a changed make_llir, instrumentation)."""


def prefix_hash() -> str:
    """sha256 of the installed CUDABackend.make_llir's source, up to and including its allocation line."""
    text = inspect.getsource(_nv.CUDABackend.make_llir)
    cut = text.find(ALLOCATION_LINE)
    if cut < 0:
        raise CannotSize(f"Triton {_triton.__version__}'s make_llir has no {ALLOCATION_LINE} pass")
    return hashlib.sha256(text[:text.index("\n", cut)].encode()).hexdigest()


def unavailable() -> str | None:
    """Why the allocation cannot be run alone with the installed Triton (None: it can)."""
    version = _triton.__version__
    if version not in CHECKED:
        try:
            differs = prefix_hash() not in CHECKED.values()
        except (CannotSize, OSError, TypeError):
            differs = True
        return (f"the allocation prefix was checked on Triton {', '.join(CHECKED)} only, not {version}"
                f"{' (its make_llir passes up to the allocation are not the copied ones)' if differs else ''}: "
                "its launches are compiled instead")
    try:
        if prefix_hash() != CHECKED[version]:
            return f"Triton {version}'s make_llir is not the one the allocation prefix was copied from: compiled instead"
    except (CannotSize, OSError, TypeError) as exc:
        return str(exc)
    return None


def shared_bytes(src, target, options: dict) -> tuple[int, object]:
    """metadata.shared of `src` (a triton ASTSource) for `target` with `options` (the launch's, as triton.compile
    takes them), and the parsed options; the stages Triton's compile runs, stopped at its allocation pass."""
    why = unavailable()
    if why:
        raise CannotSize(why)
    ir, passes, nvidia = _libtriton.ir, _libtriton.passes, _libtriton.nvidia
    backend = _compiler.make_backend(target)
    opts = backend.parse_options(dict(options, **src.parse_options()))
    if getattr(opts, "instrumentation_mode", ""):
        raise CannotSize(f"instrumentation_mode {opts.instrumentation_mode!r} adds passes before the allocation")
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    module = src.make_ir(target, opts, backend.get_codegen_implementation(opts), backend.get_module_map(), context)
    stages: dict = {}
    backend.add_stages(stages, opts, src.language)
    metadata = {"target": target, **opts.__dict__, **_compiler.get_cache_invalidating_env_vars(),
                "triton_version": _triton.__version__}
    for ext in ("ttir", "ttgir"):
        module = stages[ext](module, metadata)
    capability = int(backend._parse_arch(opts.arch))
    pm = ir.pass_manager(module.context)  # make_llir's passes up to the allocation (CHECKED keys this copy)
    passes.ttgpuir.add_combine_tensor_select_and_if(pm)
    passes.ttgpuir.add_allocate_warp_groups(pm, False)
    passes.convert.add_scf_to_cf(pm)
    passes.gluon.add_inliner(pm)
    nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(pm, capability,
                                                        _nv.get_ptx_version_from_options(opts, target.arch))
    pm.run(module, "tileprobe.allocate")
    return int(module.get_int_attr("ttg.shared") or 0), opts
