"""Run one function of an engine, compiled from its own text in the wheel, with stand-in globals: for a selection
whose module cannot be imported without the engine's whole config tree (SGLang's VisionAttention picks its backend in
a method of a torch module whose file imports the distributed and quantization layers).

`define(source, file, qualnames, scope)` parses `file` from the wheel, takes the functions `qualnames` ('func' or
'Class.method', decorators dropped), compiles them together with their own line numbers into one module whose globals
are a copy of `scope`, and returns those globals. `run_function(source, file, qualname, scope, *args, helpers=(...))`
defines `qualname` so (with the module-level `helpers` it calls), runs it, and returns its value with the lines of
the file it ran, in order. `decided(ran)` names the engine line that made the choice: the last assignment it ran and
the `if`/`elif`/`else` whose body holds it. `top_level(source, file, names, scope)` executes the top-level
definitions (functions, classes, assignments) that bind `names` into `scope`. Nothing is re-typed: the function is
the engine's text; only the names it reads from its module are stood in (the caller says which).
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass

from tileprobe.engines.triton_configs import EngineSource


@dataclass(frozen=True)
class Ran:
    value: object
    file: str  # the function's file inside the wheel
    lines: tuple[int, ...]  # the lines it ran, in order (repeats kept)
    tree: ast.AST  # the function's node, for decided()


def _find(tree: ast.Module, qualname: str) -> ast.FunctionDef:
    scope = tree.body
    *outer, name = qualname.split(".")
    for cls in outer:
        scope = next(n for n in scope if isinstance(n, ast.ClassDef) and n.name == cls).body
    return next(n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)


def _filename(source: EngineSource, file: str) -> str:
    return f"<{source.label()}>/{file}"


def _define(source: EngineSource, file: str, qualnames: tuple[str, ...], scope: dict):
    tree = ast.parse(source.read_text(file))
    nodes = [_find(tree, q) for q in qualnames]
    for node in nodes:
        node.decorator_list = []
    filename = _filename(source, file)
    glb = dict(scope)
    exec(compile(ast.Module(nodes, []), filename, "exec"), glb)  # noqa: S102 - the engine's own text, from its wheel
    return glb, nodes, filename


def define(source: EngineSource, file: str, qualnames: tuple[str, ...], scope: dict) -> dict:
    return _define(source, file, qualnames, scope)[0]


def _binds(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.AnnAssign):
        return {getattr(node.target, "id", "")}
    if isinstance(node, ast.Assign):
        return {getattr(t, "id", "") for t in node.targets}
    return set()


def top_level(source: EngineSource, file: str, names: tuple[str, ...], scope: dict) -> dict:
    """The top-level definitions of the wheel's `file` that bind `names`, decorators kept (`functools` is given
    unless `scope` has one), executed in `scope` itself (returned): LookupError naming any the file lacks."""
    body = [n for n in ast.parse(source.read_text(file)).body if _binds(n) & set(names)]
    missing = set(names) - set().union(*map(_binds, body))
    if missing:
        raise LookupError(f"{source.label()} {file} has no {', '.join(sorted(missing))}")
    scope.setdefault("functools", functools)
    exec(compile(ast.Module(body, []), _filename(source, file), "exec"), scope)  # noqa: S102 - the engine's own text
    return scope


def run_function(source: EngineSource, file: str, qualname: str, scope: dict, *args,
                 helpers: tuple[str, ...] = (), **kwargs) -> Ran:
    glb, nodes, filename = _define(source, file, (*helpers, qualname), scope)
    node = nodes[-1]
    lines: list[int] = []

    def trace(frame, event, arg):
        if frame.f_code.co_filename != filename:
            return None

        def local(frame, event, arg):
            if event == "line":
                lines.append(frame.f_lineno)
            return local
        return local

    before = sys.gettrace()
    sys.settrace(trace)
    try:
        value = glb[node.name](*args, **kwargs)
    finally:
        sys.settrace(before)
    return Ran(value, file, tuple(lines), node)


def decided(ran: Ran) -> tuple[str, str]:
    """(file:line, why) of the choice: the last assignment the function ran, and the test of the innermost
    if/elif whose body (or else) holds it, as the engine wrote it."""
    assigns = {n.lineno for n in ast.walk(ran.tree) if isinstance(n, (ast.Assign, ast.AnnAssign))}
    last = next((ln for ln in reversed(ran.lines) if ln in assigns), ran.lines[-1] if ran.lines else ran.tree.lineno)
    why, depth = "", -1
    for n in ast.walk(ran.tree):
        if not isinstance(n, ast.If):
            continue
        body = range(n.body[0].lineno, n.body[-1].end_lineno + 1)
        orelse = range(n.orelse[0].lineno, n.orelse[-1].end_lineno + 1) if n.orelse else range(0)
        span = (n.end_lineno or n.lineno) - n.lineno
        if last in body and (depth < 0 or span < depth):
            why, depth = f"if {ast.unparse(n.test)}:", span
        elif last in orelse and not (len(n.orelse) == 1 and isinstance(n.orelse[0], ast.If)) \
                and (depth < 0 or span < depth):
            why, depth = f"else (of if {ast.unparse(n.test)})", span
    return f"{ran.file}:{last}", why
