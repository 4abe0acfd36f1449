"""An engine's own Python, read from its wheel and run one top-level name at a time, for the engine code whose
modules cannot be imported whole without a GPU (vLLM's platform and backend classes import its config tree, its C
extensions and FlashInfer; SGLang's server-args resolution imports the whole server).

`TextModules(source, ...)` gives `module(name)`: a module object whose names are bound on first use, each by
running, from the wheel's text, the top-level statement(s) of the engine's file that bind it (compiled with the
file's path inside the wheel, so tracebacks and traced lines are the wheel's lines). An import statement binds one
name at a time; a name bound inside a top-level if/try/with runs that whole statement; a name the file does not bind
comes from its star imports, else the module's own `__getattr__`, else it is a NameError as in the engine.

What the engine's imports get (the import hook every served module runs with):
- the engine's own modules: served this way, each from the wheel; `pins` bind named module attributes before the
  module's own text is consulted, `stand_ins` replace whole modules (each said in the caller's docstring);
- a compiled extension the wheel ships (`*.so`): an empty module (on a CUDA host its import succeeds);
- the standard library and torch: the real modules, except `os`, whose `path.exists/isfile/isdir` answer for files
  inside the engine's package from the wheel's file list; `importlib`, whose `util.find_spec` answers from the wheel's
  declared dependencies (Requires-Dist) for a module that is not the standard library; `requests`, as a host that
  cannot reach the network (every request raises ConnectionError); `shutil`, whose `which` finds nvcc and ninja
  (SERVING_TOOLS: the serving host's toolchain, whatever the machine the audit runs on has);
- another package: an ImportError when the engine does not declare it (as on a host with only the engine's
  dependencies installed), the real module when installed here, else EngineTextError naming it.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import importlib.metadata
import os
import re
import shutil
import sys
import types
from functools import lru_cache

from tileprobe.engines import locate
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError

# distribution name -> import name, where they differ (for the Requires-Dist answer of find_spec)
DIST_MODULES = {"flashinfer_python": "flashinfer", "nvidia_ml_py": "pynvml", "sglang_kernel": "sgl_kernel",
                "pyyaml": "yaml", "pillow": "PIL", "msgspec": "msgspec"}


# packages the served text gets as installed here, whatever release the engine pins (torch answers as the target)
REAL = ("torch", "triton", "typing_extensions", "numpy", "packaging")
HOST_STAND_INS = ("os", "importlib", "requests", "shutil")  # modules the served text gets as the stand-in host's
# The stand-in host's toolchain, for the served text's `shutil.which`: the serving host's, not the machine the audit
# runs on. vLLM's `has_flashinfer()` (vllm/utils/flashinfer.py) enables FlashInfer's kernels only with
# flashinfer-cubin or with nvcc and ninja for FlashInfer's JIT; the stand-in host has the CUDA toolkit (nvcc under
# CUDA_HOME, or /usr/local/cuda) and ninja (a dependency vLLM declares), and no flashinfer-cubin.
SERVING_TOOLS = {"nvcc": "/usr/local/cuda/bin/nvcc", "ninja": "/usr/local/bin/ninja"}


def _serving_which(cmd, mode=os.F_OK | os.X_OK, path=None):
    """shutil.which on the stand-in host: nvcc and ninja are there (an absolute path to an nvcc answers as itself);
    any other command answers as on this machine."""
    name = os.path.basename(os.fspath(cmd))
    if name in SERVING_TOOLS:
        return os.fspath(cmd) if os.path.isabs(os.fspath(cmd)) else SERVING_TOOLS[name]
    return shutil.which(cmd, mode, path)


class EngineTextError(RuntimeError):
    """The engine's text needs something tileprobe neither serves from the wheel nor stands in for."""


def _bound(stmt: ast.stmt) -> set[str]:
    """The names a top-level statement binds (for a compound statement: anywhere in its bodies, not in defs)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {a.asname or a.name.split(".")[0] for a in stmt.names if a.name != "*"}
    out = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node is not stmt:
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and node is not stmt:
            out |= _bound(node)
    return out


@lru_cache(maxsize=16)
def _prefixes(names: frozenset, sep: str, suffix: str = "") -> frozenset:
    """Every `n[:i]` where `n[i]` is `sep`, over the names ending in `suffix`: `base in _prefixes(...)` says what
    `any(n.startswith(base + sep) ...)` says, without a scan of the wheel's names per question."""
    out = set()
    for n in names:
        if n.endswith(suffix):
            i = n.find(sep)
            while i >= 0:
                out.add(n[:i])
                i = n.find(sep, i + 1)
    return frozenset(out)


@lru_cache(maxsize=64)
def _declared(source: EngineSource, dist_info: str) -> dict[str, tuple[str, str | None]]:
    """import name -> (distribution, pinned version or None) of the wheel's Requires-Dist (extras' included)."""
    meta = f"{dist_info}/METADATA"
    text = source.read_text(meta) if meta in source.files_under(dist_info) else ""
    out = {}
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].split(";", 1)[0].strip()
            dist = re.split(r"[\s\[<>=!~(]", req, maxsplit=1)[0]
            pin = re.search(r"==\s*([\w.+-]+)", req)
            key = dist.lower().replace("-", "_").replace(".", "_")
            out.setdefault(DIST_MODULES.get(key, key), (dist, pin.group(1) if pin else None))
    return out


@lru_cache(maxsize=512)
def _parse(source: EngineSource, rel: str) -> ast.Module:
    return ast.parse(source.read_text(rel), rel)


class _Scope(dict):
    """A served module's globals: a missing name is bound from the module's text on first use."""

    def __init__(self, module: "TextModule") -> None:
        super().__init__()
        self.module = module

    def __missing__(self, name):
        return self.module._bind(name)


class TextModule(types.ModuleType):
    def __init__(self, owner: "TextModules", name: str, rel: str | None) -> None:
        super().__init__(name)
        self._owner, self._rel = owner, rel
        self._tree = _parse(owner.source, rel) if rel else ast.Module([], [])
        self._index: dict[str, list[int]] = {}
        for i, stmt in enumerate(self._tree.body):
            for n in _bound(stmt):
                self._index.setdefault(n, []).append(i)
        self._stars = [s for s in self._tree.body if isinstance(s, ast.ImportFrom) and s.names[0].name == "*"]
        self._ran: set[int] = set()
        self._busy: set[str] = set()
        is_pkg = rel is None or rel.endswith("__init__.py")
        scope = _Scope(self)
        dict.update(scope, {"__name__": name, "__builtins__": owner.builtins,
                            "__package__": name if is_pkg else name.rpartition(".")[0],
                            "__file__": owner.root + "/" + (rel or name.replace(".", "/") + "/__init__.py")})
        pin = owner.pins.get(name, {})
        dict.update(scope, pin(owner) if callable(pin) else pin)
        self._scope = scope

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__") and name != "__getattr__":
            raise AttributeError(name)
        try:
            return self._scope[name]
        except KeyError:
            pass
        sub = f"{self.__name__}.{name}"
        if self._owner.exists(sub):
            return self._owner.module(sub)
        if "__getattr__" in self._index:
            return self._scope["__getattr__"](name)
        raise AttributeError(f"module {self.__name__!r} ({self._rel}) has no attribute {name!r}")

    def _bind(self, name):
        scope = self._scope
        if name in self._busy or name not in self._index:
            for star in self._stars:
                mod = self._owner.import_from(star, self.__name__, scope["__package__"])
                if name in getattr(mod, "_index", {}) or name in getattr(mod, "_scope", {}):
                    value = getattr(mod, name)
                    dict.__setitem__(scope, name, value)
                    return value
            raise KeyError(name)
        self._busy.add(name)
        try:
            for i in self._index[name]:
                stmt = self._tree.body[i]
                if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                    self._import_one(stmt, name)
                elif i not in self._ran:
                    self._ran.add(i)
                    self._preload(stmt)
                    code = compile(ast.Module([stmt], []), self._rel, "exec")
                    try:
                        exec(code, scope)  # noqa: S102  (the engine's own statement, from its wheel)
                    except BaseException:
                        self._ran.discard(i)
                        raise
        finally:
            self._busy.discard(name)
        if name not in scope:
            raise KeyError(name)
        return dict.__getitem__(scope, name)

    def _preload(self, stmt: ast.stmt) -> None:
        """Bind the module names a class body reads (a class body looks its globals up without __missing__)."""
        todo = [n for n in ast.walk(stmt) if isinstance(n, ast.ClassDef)]
        for cls in todo:
            nodes = [*cls.bases, *cls.keywords, *cls.decorator_list]
            for item in cls.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    nodes += [*item.decorator_list, *item.args.defaults, *item.args.kw_defaults]
                    nodes += [a.annotation for a in (*item.args.args, *item.args.kwonlyargs) if a.annotation]
                    nodes += [item.returns] if item.returns else []
                elif not isinstance(item, ast.ClassDef):
                    nodes.append(item)
            for node in nodes:
                for n in ast.walk(node) if node is not None else ():
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                        with contextlib.suppress(KeyError):
                            self._scope[n.id]  # noqa: B018

    def _import_one(self, stmt, name: str) -> None:
        for a in stmt.names:
            if (a.asname or a.name.split(".")[0]) != name:
                continue
            if isinstance(stmt, ast.Import):
                top = self._owner.hook(a.name, self._scope, None, (), 0)
                value = self._owner.hook(a.name, self._scope, None, ("_",), 0) if a.asname else top
            else:
                mod = self._owner.import_from(stmt, self.__name__, self._scope["__package__"], a.name)
                try:
                    value = getattr(mod, a.name)
                except AttributeError as exc:  # tileprobe's serving failed, not the engine's import: not an ImportError
                    raise EngineTextError(f"{self._rel}: from {mod.__name__} import {a.name}: {exc}") from exc
            dict.__setitem__(self._scope, name, value)

    def touch(self, kind=ast.FunctionDef) -> None:
        """Bind every top-level `kind` (e.g. to run registration decorators)."""
        for stmt in self._tree.body:
            if isinstance(stmt, kind):
                self._scope[stmt.name]  # noqa: B018


class _WheelOS(types.ModuleType):
    """os, with path.exists/isfile/isdir answering from the wheel for files under the served root."""

    def __init__(self, owner: "TextModules") -> None:
        super().__init__("os")
        path = types.ModuleType("os.path")
        path.__dict__.update(os.path.__dict__)
        root = owner.root + "/"

        def answer(real):
            def check(p):
                p = os.fspath(p)
                if not p.startswith(root):
                    return real(p)
                rel = p[len(root):].rstrip("/")
                return rel in owner.names or any(n.startswith(rel + "/") for n in owner.names)
            return check

        path.exists, path.isfile, path.isdir = answer(os.path.exists), answer(os.path.isfile), answer(os.path.isdir)
        self.__dict__.update({k: v for k, v in os.__dict__.items() if k != "path"})
        self.path = path


class TextModules:
    """The served modules of one engine release (the module docstring)."""

    def __init__(self, source: EngineSource, stand_ins: dict | None = None, pins: dict | None = None,
                 extension_stand_in=None, third_party: dict | None = None, dist: str | None = None,
                 parent: "TextModules | None" = None) -> None:
        self.source, self.stand_ins, self.pins = source, dict(stand_ins or {}), dict(pins or {})
        self.third_party = dict(third_party or {})  # a declared dependency's module name -> its stand-in module
        self.extension_stand_in = extension_stand_in
        self.root = f"<{source.engine}-{source.version} wheel>"
        self.names = frozenset(n for n in source.files_under(source.engine))
        self.modules: dict[str, types.ModuleType] = {}
        self._saved: dict | None = None
        self.parent, self.deps = parent, {}
        self.substituted: list[str] = []  # a pinned dependency that is not here, read as the nearest release here
        self.builtins = dict(builtins.__dict__, __import__=self.hook)
        dist = (dist or source.engine).replace("-", "_")
        self.declared = _declared(source, f"{dist}-{source.version}.dist-info")
        self._os = _WheelOS(self)
        util = types.ModuleType("importlib.util")
        util.__dict__.update(importlib.util.__dict__, find_spec=self.find_spec)
        self._importlib = types.ModuleType("importlib")
        self._importlib.__dict__.update(importlib.__dict__, util=util, import_module=self.import_module)
        self._requests = types.ModuleType("requests")

        def offline(*a, **k):
            raise ConnectionError("tileprobe: the stand-in host reaches no network")
        self._requests.__dict__.update(get=offline, post=offline, head=offline, RequestException=ConnectionError)
        self._shutil = types.ModuleType("shutil")
        self._shutil.__dict__.update(shutil.__dict__, which=_serving_which)

    @contextlib.contextmanager
    def active(self):
        """The served modules in sys.modules while inside (as an import would leave them); put back after."""
        self._saved = {}
        for name, mod in self.modules.items():
            self._saved[name] = sys.modules.get(name)
            sys.modules[name] = mod
        try:
            yield self
        finally:
            saved, self._saved = self._saved, None
            for name, before in saved.items():
                if before is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = before

    def _register(self, name: str, mod) -> None:
        root = self
        while root.parent is not None:
            root = root.parent
        if root._saved is not None:  # dataclasses and typing look a class's module up in sys.modules
            root._saved.setdefault(name, sys.modules.get(name))
            sys.modules[name] = mod

    def _top(self) -> "TextModules":
        root = self
        while root.parent is not None:
            root = root.parent
        return root

    def notes(self) -> tuple[str, ...]:
        """What the served modules read other than as the engine pins it (one line each)."""
        return tuple(dict.fromkeys(self._top().substituted))

    def _dependency(self, top: str) -> "TextModules | None":
        """A declared dependency pinned to a release other than the one installed here (or not installed): served
        from that release's wheel, found as tileprobe finds engine wheels (tileprobe.engines.locate)."""
        if top in self.deps:
            return self.deps[top]
        dist, version = self.declared[top]
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            if version is None or importlib.metadata.version(dist) == version:
                return None
        try:
            pkg = locate.find_release(dist, version)
        except UsageError as exc:
            pkg = locate.nearest(version, locate.releases(dist))
            if pkg is None:
                raise EngineTextError(f"{self.source.label()} imports {top} ({dist}=={version}): {exc}") from None
            self._top().substituted.append(
                f"{self.source.label()} pins {dist} {version}, which is not installed or cached here: its imports of "
                f"{top} read {pkg.version}, the nearest release here, instead")
        if pkg.wheel is None:
            return None
        src = EngineSource(top, pkg.version, str(pkg.wheel), "wheel")
        self.deps[top] = TextModules(src, dist=dist, parent=self)
        return self.deps[top]

    # --- where a module comes from ---------------------------------------------------------------------------
    def _rel(self, name: str) -> str | None:
        base = name.replace(".", "/")
        for rel in (base + ".py", base + "/__init__.py"):
            if rel in self.names:
                return rel
        return None

    def exists(self, name: str) -> bool:
        return name in self.stand_ins or self._rel(name) is not None or self._extension(name) \
            or self._folder(name)

    def _folder(self, name: str) -> bool:
        """Some file of the engine lies below the module's folder (a name starts with `base/`)."""
        return name.replace(".", "/") in _prefixes(self.names, "/")

    def _extension(self, name: str) -> bool:
        """A compiled module of that name (a `.so` name starts with `base.`)."""
        return name.replace(".", "/") in _prefixes(self.names, ".", ".so")

    def module(self, name: str) -> types.ModuleType:
        if name in self.modules:
            return self.modules[name]
        if name in self.stand_ins:
            mod = self.modules[name] = types.ModuleType(name)
            if self._saved is not None:
                self._saved.setdefault(name, sys.modules.get(name))
                sys.modules[name] = mod
            made = self.stand_ins[name]
            mod.__dict__.update(made(self) if callable(made) else made)
        elif self._rel(name) is not None or self._folder(name):
            mod = TextModule(self, name, self._rel(name))
        elif self._extension(name):
            mod = types.ModuleType(name)
            if self.extension_stand_in:
                mod.__dict__.update(self.extension_stand_in(name))
        else:
            raise ModuleNotFoundError(f"No module named {name!r} in {self.source.label()}", name=name)
        self.modules[name] = mod
        self._register(name, mod)
        parent, _, child = name.rpartition(".")
        if parent:
            pmod = self.module(parent)
            if isinstance(pmod, TextModule):
                dict.setdefault(pmod._scope, child, mod)
            else:
                setattr(pmod, child, mod)
        return mod

    def find_spec(self, name, package=None):
        top = name.split(".")[0]
        if top == self.source.engine:
            return importlib.machinery.ModuleSpec(name, None) if self.exists(name) else None
        if top in sys.stdlib_module_names:
            return importlib.util.find_spec(name, package)
        return importlib.machinery.ModuleSpec(name, None) if top in self.declared else None

    def import_module(self, name, package=None):
        if name.startswith("."):
            name = importlib.util.resolve_name(name, package)
        return self.hook(name, {}, None, ("_",), 0)

    def _outside(self, name: str):
        top = name.split(".")[0]
        if top == "os":
            return self._os if name == "os" else importlib.import_module(name)
        if top == "importlib":
            return self._importlib if name == "importlib" else getattr(self._importlib, name.split(".")[1],
                                                                       None) or importlib.import_module(name)
        if top == "requests":
            return self._requests
        if top == "shutil":
            return self._shutil
        if top in sys.stdlib_module_names or top in REAL:
            return importlib.import_module(name)
        if name in self.third_party:
            return self.third_party[name]
        if top not in self.declared:
            raise ModuleNotFoundError(f"No module named {name!r} ({self.source.label()} does not declare it)",
                                      name=name)
        if importlib.util.find_spec(top) is not None:
            return importlib.import_module(name)
        raise EngineTextError(f"{self.source.label()} imports {name}, a dependency tileprobe neither has nor stands "
                              "in for")  # (a pinned release other than the installed one is served: hook)

    # --- the import hook the served text runs with -----------------------------------------------------------
    def hook(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level:
            package = (globals or {}).get("__package__") or ""
            name = importlib.util.resolve_name("." * level + name, package) if name else \
                package.rsplit(".", level - 1)[0]
        top = name.split(".")[0]
        if top != self.source.engine and top in self.declared and top not in (*self.third_party, *REAL) \
                and self._dependency(top) is not None:
            return self.deps[top].hook(name, globals, locals, fromlist, 0)
        if top != self.source.engine:
            mod = self._outside(name)
            return mod if fromlist else self._outside(top) if top in HOST_STAND_INS else \
                sys.modules.get(top, mod)
        mod = self.module(name)
        for part in fromlist or ():
            if part != "*" and part != "_" and self.exists(f"{name}.{part}"):
                if not (isinstance(mod, TextModule) and part in mod._index):
                    self.module(f"{name}.{part}")
        if fromlist:
            return mod
        parts = name.split(".")
        for i in range(1, len(parts)):
            self.module(".".join(parts[: i + 1]))
        return self.module(top)

    def import_from(self, stmt: ast.ImportFrom, module: str, package: str, part: str | None = None):
        globs = {"__package__": package, "__name__": module}
        mod = self.hook(stmt.module or "", globs, None, (part or "_",), stmt.level)
        return mod
