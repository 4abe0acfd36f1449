"""A Triton kernel's source as data, and the standalone module that Triton compiles it from.

A kernel is read from a file (an installed engine's, or one inside a wheel read as a zip) and never imported from
the engine: `extract` keeps only the named function, the @triton.jit functions it calls (transitively), and the
module-level assignments those use (LOG2E = tl.constexpr(...)), with their decorators (@triton.autotune lists),
under `import triton` / `import triton.language as tl`. The module is written into the cache by its content hash
and imported from there, so Triton's own `inspect.getsource` finds it.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tileprobe.errors import UsageError

HEADER = "import triton\nimport triton.language as tl\n\n\n"


@dataclass(frozen=True)
class KernelSource:
    text: str  # a standalone module: imports triton and defines `function`
    function: str
    origin: str  # where it was read from (engine release and path), for rows and errors

    @property
    def sha256(self) -> str:
        return hashlib.sha256(f"{self.function}\n{self.text}".encode()).hexdigest()


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _segment(lines: list[str], node: ast.stmt) -> str:
    first = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    return "".join(lines[first - 1:node.end_lineno])


def extract(text: str, function: str, origin: str) -> KernelSource:
    """The standalone module for `function` of a kernel file's text. UsageError when the text does not parse or has
    no such top-level function."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise UsageError(f"{origin}: not Python source ({exc.msg}, line {exc.lineno})") from None
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    assigns: dict[str, ast.stmt] = {}
    for n in tree.body:
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                if isinstance(t, ast.Name):
                    assigns[t.id] = n
    if function not in funcs:
        raise UsageError(f"{origin}: no top-level function {function!r} (functions: "
                         f"{', '.join(sorted(funcs)) or 'none'})")
    keep: list[ast.stmt] = []
    todo = [funcs[function]]
    while todo:
        node = todo.pop()
        if node in keep:
            continue
        keep.append(node)
        for name in _names(node):
            dep = funcs.get(name)
            if dep is not None and _is_triton(dep) and dep not in keep:
                todo.append(dep)
            elif name in assigns and assigns[name] not in keep:
                todo.append(assigns[name])
    lines = text.splitlines(keepends=True)
    body = "\n\n".join(_segment(lines, n) for n in sorted(keep, key=lambda n: n.lineno))
    return KernelSource(HEADER + body + "\n", function, origin)


def _is_triton(fn: ast.FunctionDef) -> bool:
    return any("triton" in ast.unparse(d) or ast.unparse(d) in ("jit", "autotune") for d in fn.decorator_list)


_LOADED: dict[str, object] = {}
_LOADING: list[Path] = []  # the cache of each module `load` is running now (innermost last)


def loading_cache() -> Path | None:
    """The cache folder of the kernel module `load` is running now (None outside one): a module that serves more
    files of its own (tileprobe.audit.loader's stub, which imports the engine's module from the wheel) writes them
    into the cache the compile uses (--cache-dir), not the default one."""
    return _LOADING[-1] if _LOADING else None


def load(source: KernelSource, cache: Path):
    """The kernel object (a JITFunction, or an Autotuner wrapping one) from the module written into `cache`."""
    key = source.sha256
    if key in _LOADED:
        return _LOADED[key]
    folder = cache / "triton-src"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"k_{key[:24]}.py"
    if not path.is_file() or path.read_text() != source.text:
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(source.text)
        os.replace(tmp, path)
    name = f"tileprobe_triton_{key[:24]}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    _LOADING.append(Path(cache))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # the kernel's own module-level code failed: say where, not a traceback
        sys.modules.pop(name, None)
        raise UsageError(f"{source.origin}: the kernel module does not load ({type(exc).__name__}: {exc})") from None
    finally:
        _LOADING.pop()
    kernel = getattr(module, source.function)
    _LOADED[key] = kernel
    return kernel
