"""The kernel object of a captured launch, for a compile that cannot cut the kernel out of its file (a kernel that
calls @triton.jit helpers of other engine modules, or whose defaults read module globals: vLLM's unified attention).

`module_source` writes a KernelSource whose module text is a stub: it names the audit entry, the engine release
(its wheel), the target, and the sha256 of every engine file the entry serves; loading it (in tileprobe's compile,
in this process or a worker) imports the engine's own module under the same stand-in session the capture used and
returns the @triton.jit object, whose globals stay the engine module's. The stub's text is the content key: another
release, target or file content is another key.
"""

from __future__ import annotations

import hashlib

from tileprobe.audit import capture
from tileprobe.audit.kernels import KERNELS, AuditKernel
from tileprobe.backends.triton.source import KernelSource, loading_cache
from tileprobe.engines.triton_configs import EngineSource, find_engine
from tileprobe.targets import Target, profile


def kernel(entry: str, target: str, wheel: str, function: str, installed: str | None = None):
    """The @triton.jit `function` of `entry`'s module (else of another module the entry serves), imported from
    `wheel` as `target` would see it; `installed`: the release of an installed engine, whose package folder `wheel`
    then is (never read as a folder of wheels)."""
    k = KERNELS[entry]
    src = EngineSource(k.engine, installed, wheel, "installed") if installed else find_engine(k.engine, wheel)
    # the engine's files go into the cache the compile loading this stub uses (--cache-dir), else the default one
    with capture.engine_session(src, profile(target), k.allow, k.stand_ins, loading_cache()) as session:
        launcher = session.module(k.module)
        found = k.kernel_of(session, function) if k.kernel_of else None
        if found is not None:  # a kernel the engine defines at run time (capture.kernel_name)
            return found
        if hasattr(launcher, function):
            return getattr(launcher, function)
        for name in sorted(k.allow):  # a kernel of another served module the launcher calls into (vLLM's fla ops)
            try:
                module = session.module(name)
            except ImportError:  # a file the entry lists for its manifest only (facts read from it, not imported)
                continue
            found = getattr(module, function, None)
            if found is not None:
                return found
        raise AttributeError(f"{entry}: no {function} in {k.module} or the modules it serves")


def module_source(entry: AuditKernel, src: EngineSource, target: Target, function: str) -> KernelSource:
    name = function.rsplit(".", 1)[-1]  # a run-time kernel's `module.name` (capture.kernel_name): the stub binds name
    shas = [f"# {m}: sha256 {hashlib.sha256(src.read_text(m.replace('.', '/') + '.py').encode()).hexdigest()}"
            for m in sorted(entry.allow)]
    text = "\n".join([
        f'"""{entry.name}: {function} from {src.label()}, imported from the wheel under the {target.name} stand-in."""',
        f"# engine: {src.label()} ({src.origin})", *shas,
        "from tileprobe.audit import loader",
        f"{name} = loader.kernel({entry.name!r}, {target.name!r}, {src.origin!r}, {function!r}"
        + (f", installed={src.version!r})" if src.kind == "installed" else ")"), ""])
    return KernelSource(text, name, f"{src.label()} {entry.module_file}::{function}")
