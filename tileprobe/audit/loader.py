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
import sys

from tileprobe.audit import capture
from tileprobe.audit.kernels import KERNELS, AuditKernel
from tileprobe.backends.triton.source import KernelSource
from tileprobe.engines.triton_configs import EngineSource, find_engine
from tileprobe.targets import Target, profile


def kernel(entry: str, target: str, wheel: str, function: str):
    """The @triton.jit `function` of `entry`'s module, imported from `wheel` as `target` would see it; else of the
    served module that defines it (a launcher that calls into other modules' kernels: vLLM's SSD scan)."""
    k = KERNELS[entry]
    src = find_engine(k.engine, wheel)
    with capture.engine_session(src, profile(target), k.allow, k.stand_ins) as session:
        module = session.module(k.module)
        if hasattr(module, function):
            return getattr(module, function)
        for name in k.allow:
            defined = vars(sys.modules[name]) if name in sys.modules else {}
            if function in defined:
                return defined[function]
        raise AttributeError(f"{entry}: no {function} in {k.module} or the modules it serves")


def module_source(entry: AuditKernel, src: EngineSource, target: Target, function: str) -> KernelSource:
    shas = [f"# {m}: sha256 {hashlib.sha256(src.read_text(m.replace('.', '/') + '.py').encode()).hexdigest()}"
            for m in sorted(entry.allow)]
    text = "\n".join([
        f'"""{entry.name}: {function} from {src.label()}, imported from the wheel under the {target.name} stand-in."""',
        f"# engine: {src.label()} ({src.origin})", *shas,
        "from tileprobe.audit import loader",
        f"{function} = loader.kernel({entry.name!r}, {target.name!r}, {src.origin!r}, {function!r})", ""])
    return KernelSource(text, function, f"{src.label()} {entry.module_file}::{function}")
