"""Launch capture: run an engine's own launcher, read from its wheel, on stand-in tensors, and record every Triton
launch it makes, as the target would see it, without a GPU and without launching.

Inside `engine_session` (a context manager; everything is put back after):
- a `sys.meta_path` finder serves the engine's modules for an allowlist from the wheel (read as a zip, each file
  written once under the cache by content and loaded from there, so Triton's `inspect.getsource` reads it;
  a JSON data folder directly beside it, such as vLLM's fused_moe/configs, is written beside it), empty
  packages for their parents (the engine's heavy `__init__`s never run), and stand-in modules for the platform
  helpers (`stand_ins`: module name -> a function of the target and the engine release that returns the module's
  attributes; it may import served modules, e.g. to subclass the engine's own platform class); any other
  module of the engine is an ImportError naming it; a stand_ins value `Alias(package)` serves a top-level name and
  its submodules from the wheel's files of the engine's `package`, under the alias name (vLLM's
  import_utils.import_triton_kernels: sys.modules["triton_kernels"] = vllm.third_party.triton_kernels, so
  `triton_kernels.matmul_ogs` loads from vllm/third_party/triton_kernels/matmul_ogs.py as `triton_kernels.…`); a
  name the aliased package does not ship is an ImportError, as it is to Python;
- `torch.cuda` answers as the target (capability, device properties with `shared_memory_per_block_optin` and
  `multi_processor_count`, `is_available`), before the engine's modules import, so capability globals cached at
  import (SGLang's `CUDA_CAPABILITY = torch.cuda.get_device_capability()`) are the target's; Triton's active driver
  (`triton.runtime.driver.active`, which triton.language.target_info's is_cuda / cuda_capability_geq read) answers
  the target's GPUTarget and device properties;
- `JITFunction.run` records the launch (bound arguments: a tensor as dtype/shape/strides (a wrapped tensor, such as
  triton_kernels' Tensor, by its storage's), a host TMA descriptor as Triton's signature writes it
  (`tensordesc<bf16[1, 32, 128]>`), numbers, constexprs; the options num_warps, num_stages, ...; the grid; the
  kernel's file and function (`module.function` for a kernel the engine defines at run time: kernel_name); the engine
  line of the `kernel[grid]` call; the capability branches the launcher took) and launches nothing (the launched
  @triton.jit objects stay in `session.kernels`); `Autotuner.run` records one launch per
  config left after the engine's own pruning (`prune_configs`: early_config_prune, perf_model) and benchmarks none;
  an autotuned kernel's function launched directly with one of its configs (a caller that keeps the autotuner's
  pick and launches it again: vLLM's `launch_autotuned`) is recorded as the autotuner's launch, every config again;
- a line tracer on the served files only records which lines ran since the last launch: an `if`/`elif`/`else`
  whose test names the device (CUDA_CAPABILITY, is_cuda, current_platform, ...) and whose body ran is a taken branch.
sys.modules is left as it was for the engine's package and its aliases (every module of them the session added is
removed); a third-party library an engine module imported stays loaded, as torch and triton are (torch._dynamo cannot
be imported twice in one process: its TORCH_LIBRARY registrations refuse a second run).
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.util
import itertools
import os
import re
import sys
import tempfile
import types
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.engines.triton_configs import EngineSource
from tileprobe.errors import UsageError
from tileprobe.lazy import LazyModule
from tileprobe.targets import Target

torch = LazyModule("torch")  # torch and Triton load at the first capture, not with the CLI
triton = LazyModule("triton")
tl = LazyModule("triton.language")
_jit = LazyModule("triton.runtime.jit")
_autotuner = LazyModule("triton.runtime.autotuner")
_driver_config = LazyModule("triton.runtime.driver")
_compiler = LazyModule("triton.backends.compiler")
_tensor_descriptor = LazyModule("triton.tools.tensor_descriptor")

# torch dtype name -> Triton's pointer dtype name
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64",
                 "float8_e4m3fn": "fp8e4nv", "float8_e5m2": "fp8e5", "int8": "i8", "int16": "i16",
                 "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64",
                 "bool": "i1"}
_TL_NAMES = ("bfloat16", "float16", "float32", "float64", "float8e4nv", "float8e5", "int8", "int16", "int32", "int64",
             "uint8", "int1")
# Options a launch passes beside the kernel's parameters that tileprobe's compile takes (HIP-only ones dropped).
COMPILE_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "launch_pdl")
DEVICE_TEST = re.compile(r"CUDA_CAPABILITY|capability|_is_cuda|_is_hip|\bis_hip_\b|is_cuda\(|is_hip\(|is_sm\d+|"
                         r"current_platform|is_blackwell|is_hopper|_is_gfx|device_capability")
# A tuned-config lookup's tests (vLLM get_moe_configs / try_get_optimal_moe_config: the user's folder, the file named
# after the device, the file's configs or the default): recorded like a device branch, since the file is the device's.
CONFIG_TEST = re.compile(r"config_file_path|\bconfigs\b|override_config|config_folder")


@dataclass(frozen=True)
class TensorArg:
    dtype: str  # Triton's name: bf16, fp32, i32, ...
    shape: tuple[int, ...]
    strides: tuple[int, ...]

    def __str__(self) -> str:
        return f"{self.dtype}[{'x'.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Launch:
    """One Triton launch the launcher made (or, for an autotuned kernel, would try: `autotune` = (index, of n left
    after pruning, of n listed))."""

    kernel: str  # the @triton.jit function's name
    kernel_file: str  # its file inside the wheel (sglang/kernels/ops/attention/extend_attention.py)
    args: tuple[tuple[str, object], ...]  # every parameter, in order: TensorArg, number, bool, None, 'tl.dtype'
    options: tuple[tuple[str, object], ...]  # num_warps, num_stages, ... as launched
    grid: tuple[int, ...]
    call_site: str  # file:line of the kernel[grid](...) call in the engine
    branches: tuple[str, ...]  # 'file:line if ...' of each device branch the launcher took before this launch
    autotune: tuple[int, int, int] | None = None
    unspecialized: tuple[str, ...] = ()  # the kernel's do_not_specialize parameters (Triton types them by magnitude)
    constexprs: tuple[str, ...] = ()  # the kernel's tl.constexpr parameters (compiled at their value)

    def arg(self, name: str, default=None):
        return dict(self.args).get(name, dict(self.options).get(name, default))

    def identity(self) -> tuple:
        return (self.kernel_file, self.kernel, self.args, self.options)


def describe(value):
    """A launch argument as data: a tensor by dtype/shape/strides, a Triton dtype by its name, numbers as they are."""
    if isinstance(value, torch.Tensor):
        name = str(value.dtype).removeprefix("torch.")
        if name not in _TORCH_DTYPES:
            raise UsageError(f"a launch passes a {value.dtype} tensor, which tileprobe cannot compile for")
        return TensorArg(_TORCH_DTYPES[name], tuple(value.shape), tuple(value.stride()))
    if isinstance(value, _tensor_descriptor.TensorDescriptor):  # a host TMA descriptor, as Triton's signature has it
        return f"tensordesc<{describe(value.base).dtype}[{', '.join(str(int(b)) for b in value.block_shape)}]>"
    data = getattr(getattr(value, "storage", None), "data", None)
    if isinstance(data, torch.Tensor) and hasattr(value, "data_ptr") and isinstance(value.dtype, torch.dtype):
        # a wrapped tensor (triton_kernels' Tensor over a Storage): Triton's binder reads its dtype and data_ptr
        return describe(data)
    if isinstance(value, tl.dtype):  # by the triton.language name that is it (tl.bfloat16's .name is 'bf16')
        return next((f"tl.{n}" for n in (value.name, *_TL_NAMES) if getattr(tl, n, None) == value), str(value))
    if isinstance(value, tl.constexpr):
        return describe(value.value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, _jit.JITFunction):
        return f"jit:{value.__name__}"
    return repr(value)


def _device_props(target: Target):
    major, minor = (int(x) for x in target.cc.split("."))
    return types.SimpleNamespace(name=target.device_name, major=major, minor=minor,
                                 multi_processor_count=target.sms,
                                 shared_memory_per_block_optin=target.smem_optin,
                                 shared_memory_per_multiprocessor=target.smem_per_sm,
                                 max_shared_memory_per_block_optin=target.smem_optin,
                                 total_memory=0, L2_cache_size=target.l2_bytes,
                                 regs_per_multiprocessor=target.regs_per_sm,
                                 max_threads_per_multi_processor=target.max_threads_per_sm, warp_size=32,
                                 gcnArchName="")


def cuda_answers(target: Target) -> dict:
    """torch.cuda's functions as the target answers them."""
    major, minor = (int(x) for x in target.cc.split("."))
    props = _device_props(target)
    return {"get_device_capability": lambda device=None: (major, minor),
            "get_device_properties": lambda device=None: props,
            "get_device_name": lambda device=None: target.device_name,
            "is_available": lambda: True, "device_count": lambda: 1, "current_device": lambda: 0}


@dataclass(frozen=True)
class Alias:
    """A stand_ins value: the top-level name is the engine's package `package` (dotted, inside the wheel)."""

    package: str


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, session: "Session") -> None:
        self.session = session

    def find_spec(self, name, path=None, target=None):
        s = self.session
        top = name.split(".")[0]
        if isinstance(s.stand_ins.get(top), Alias):
            return s.alias_spec(name, s.stand_ins[top].package + name[len(top):])
        parent = any(a.startswith(name + ".") for a in (*s.allow, *s.stand_ins))
        if top != s.package and not (name in s.stand_ins or parent):
            return None  # another distribution's module, not stood in: imported as Python finds it
        if name in s.stand_ins:
            spec = importlib.util.spec_from_loader(name, _StandIn(s, name), is_package=parent)
            if parent:
                spec.submodule_search_locations = []
            return spec
        if name in s.allow:
            file = s.file_of(name)
            return importlib.util.spec_from_file_location(name, file)
        if parent:  # a parent of served modules: an empty package (the engine's own __init__ never runs)
            spec = importlib.util.spec_from_loader(name, _StandIn(s, name), is_package=True)
            spec.submodule_search_locations = []
            return spec
        raise ImportError(f"tileprobe audit: {name} is not among the engine modules this kernel's entry serves "
                          f"({', '.join(sorted(s.allow))}) or stands in for ({', '.join(sorted(s.stand_ins))})")


class _StandIn(importlib.abc.Loader):
    def __init__(self, session: "Session", name: str) -> None:
        self.session, self.name = session, name

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        make = self.session.stand_ins.get(self.name)
        if make is not None:
            module.__dict__.update(make(self.session.target, self.session.source))


@dataclass
class Session:
    """What one engine_session serves and what it recorded."""

    source: EngineSource
    target: Target
    allow: frozenset[str]
    stand_ins: dict
    folder: Path
    launches: list[Launch] = field(default_factory=list)
    flags: dict = field(default_factory=dict)  # the engine flags the user passes (--moe-backend ...): hooks read them
    kernels: dict = field(default_factory=dict)  # Launch.kernel -> the @triton.jit object launched
    _ran: set = field(default_factory=set)  # (file, line) run since the last launch
    _imported_by: dict = field(default_factory=dict)  # file -> lines run while the modules imported (capability
    # globals: a branch every launch after took)
    _files: dict = field(default_factory=dict)  # served file path -> its path inside the wheel
    _ifs: dict = field(default_factory=dict)  # served file path -> [(test line, text, body lines, else lines)]
    _autotune: tuple | None = None
    _lookup: set = field(default_factory=set)  # lines of the last tuned-config lookup (CONFIG_TEST) that ran: they
    # count for every launch until the next lookup runs (one lookup serves both of fused_experts' GEMMs)
    _tuners: dict = field(default_factory=dict)  # id of an autotuned kernel's @triton.jit function -> its Autotuner

    @property
    def package(self) -> str:
        return self.source.engine

    def alias_spec(self, name: str, real: str):
        """The spec of `name`, an alias of the engine's module `real`: its file from the wheel (a package's
        __init__.py, with no search path of its own: this finder serves its submodules; a folder of modules without
        one, a namespace package, is an empty package)."""
        rel = real.replace(".", "/")
        names = set(self.source.files_under(rel.rsplit("/", 1)[0]))
        if f"{rel}/__init__.py" in names:
            return importlib.util.spec_from_file_location(name, self._file(f"{rel}/__init__.py"),
                                                          submodule_search_locations=[])
        if f"{rel}.py" in names:
            return importlib.util.spec_from_file_location(name, self._file(f"{rel}.py"))
        if any(n.startswith(f"{rel}/") and n.endswith(".py") for n in names):  # a folder of modules, no __init__
            spec = importlib.util.spec_from_loader(name, _StandIn(self, name), is_package=True)
            spec.submodule_search_locations = []
            return spec
        raise ModuleNotFoundError(f"tileprobe audit: {name} (an alias of {real}): {self.source.label()} ships no "
                                  f"{rel}.py", name=name)

    def file_of(self, module: str) -> str:
        return self._file(module.replace(".", "/") + ".py")

    def _file(self, rel: str) -> str:
        text = self.source.read_text(rel)
        data = {d: self.source.read_text(d) for d in data_beside(self.source, rel)}
        digest = hashlib.sha256("\0".join([text, *(f"{d}\0{t}" for d, t in data.items())]).encode()).hexdigest()[:16]
        path = self.folder / digest / rel
        if not path.is_file():
            for d, t in data.items():  # the data first: the module's file marks the folder complete
                write_whole(self.folder / digest / d, t)
            write_whole(path, text)
        self._files[str(path)] = rel
        self._ifs[str(path)] = _device_ifs(digest, rel, text)
        self._data_beside(rel, path.parent)
        return str(path)

    def _data_beside(self, rel: str, folder: Path) -> None:
        """The wheel's JSON files in folders beside the module (no Python file on the way: vLLM's
        configs/selective_state_update/*.json next to mamba_ssm.py), written beside its served copy, so a module
        that reads its bundled configs by its own path reads the release's."""
        here = rel.rsplit("/", 1)[0]
        names = self.source.files_under(here)
        code = {n.rsplit("/", 1)[0] for n in names if n.endswith(".py")}
        for name in names:
            parts = name[len(here) + 1:].split("/")
            if not name.endswith(".json") or len(parts) < 2:
                continue
            if any(f"{here}/{'/'.join(parts[:i])}" in code for i in range(1, len(parts))):
                continue
            out = folder.joinpath(*parts)
            if not out.is_file():
                write_whole(out, self.source.read_text(name))

    def module(self, name: str):
        """The engine module `name`, imported through the session's finder (the lines its import ran count for
        every launch after: a capability global cached at import is a branch each launch took)."""
        module = importlib.import_module(name)
        for f, ln in self._ran:
            self._imported_by.setdefault(f, set()).add(ln)
        self._ran.clear()
        return module

    # --- recording ------------------------------------------------------------------------------------------
    def _trace(self, frame, event, arg):
        if frame.f_code.co_filename not in self._files:
            return None
        ran = self._ran

        def local(frame, event, arg):
            if event == "line":
                ran.add((frame.f_code.co_filename, frame.f_lineno))
            return local

        return local

    def _branches(self, values: dict) -> tuple[str, ...]:
        """The device branches taken; `values`: the launcher frame's locals (an assigned device expression is
        shown with the value it had at the launch)."""
        out = []
        ran: dict[str, set[int]] = {}  # the lines run since the last launch and by the last lookup, by file
        for f, ln in itertools.chain(self._ran, self._lookup):
            if f in self._ifs:
                ran.setdefault(f, set()).add(ln)
        for path, ifs in self._ifs.items():
            lines = ran.get(path, set()) | self._imported_by.get(path, set())
            if not lines:
                continue
            rel = self._files[path]
            for line, text, body, orelse in ifs:  # device and config tests only (_device_ifs)
                if body is None:  # a device expression assigned (vLLM: tuned_large_head = ... and capability)
                    name = text.split(" = ", 1)[0]
                    if line in lines:
                        got = f" -> {values[name]!r}" if name in values else ""
                        out.append(f"{rel}:{line} {text}{got}")
                elif lines & body:
                    out.append(f"{rel}:{line} {text}")
                elif orelse and lines & orelse:
                    out.append(f"{rel}:{min(orelse) - 1} else (of line {line} {text})")
        return tuple(out)

    def _launcher_frame(self, kernel_file: str):
        """The innermost engine frame of the kernel[grid](...) call: in the kernel's own file when the launch went
        through a helper of another file (vLLM's triton_helpers.launch_autotuned), else the innermost one."""
        f = sys._getframe(2)
        while f is not None and f.f_code.co_filename not in self._files:
            f = f.f_back
        own = f
        while own is not None and own.f_code.co_filename != kernel_file:
            own = own.f_back
        return own or f

    def record(self, fn, args: tuple, grid, kwargs: dict) -> None:
        names = [p.name for p in fn.params]
        bound = dict(zip(names, args))
        options = {}
        for k, v in kwargs.items():
            (bound if k in names else options)[k] = v
        for p in fn.signature.parameters.values():
            if p.name not in bound and p.default is not p.empty:
                bound[p.name] = p.default
        if callable(grid):
            grid = grid({**bound, **options})
        grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
        fn_file = fn.fn.__code__.co_filename
        rel = self._files.get(fn_file, fn_file)
        frame = self._launcher_frame(fn_file)
        site = f"{self._files[frame.f_code.co_filename]}:{frame.f_lineno}" if frame else "?"
        values = {**frame.f_globals, **frame.f_locals} if frame else {}
        self.kernels[kernel_name(fn)] = fn
        self.launches.append(Launch(kernel_name(fn), rel, tuple((n, describe(bound.get(n))) for n in names),
                                    tuple((k, describe(v)) for k, v in options.items()), grid, site,
                                    self._branches(values), self._autotune,
                                    tuple(p.name for p in fn.params if p.do_not_specialize),
                                    tuple(p.name for p in fn.params if p.is_constexpr)))
        lookup = {(f, ln) for f, ln in self._ran if self._ifs.get(f)
                  for line, text, body, orelse in self._ifs[f]
                  if CONFIG_TEST.search(text) and (ln == line or ln in (body or ()) or ln in orelse)}
        if lookup:
            self._lookup = lookup
        self._ran.clear()


def kernel_name(fn) -> str:
    """The kernel's function name; `module.name` for a kernel the engine defines at run time (triton_kernels'
    specialize: source text exec'd into a module made for it, e.g. matmul_ogs_swiglu_dflt), which is no module's
    file (tileprobe.audit.loader gets it back by running the launcher)."""
    module = sys.modules.get(fn.fn.__module__)
    if getattr(module, "__file__", None) == fn.fn.__code__.co_filename:
        return fn.fn.__name__
    return f"{fn.fn.__module__}.{fn.fn.__name__}"


def write_whole(path: Path, text: str) -> None:
    """`text` into `path` as one step: written to a temporary file of its own in the same folder, then renamed over
    it, so processes serving the same engine files into one cache at once never read half a file nor take each
    other's temporary file away (the last rename wins; every writer writes the same text)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def data_beside(source: EngineSource, rel: str) -> list[str]:
    """The JSON files of the data folders directly beside the module `rel` (a subfolder of JSON and no code,
    e.g. vLLM's fused_moe/configs, which get_moe_configs opens through the module's own __file__): written beside the
    served file, so the engine's own lookup finds what the wheel ships."""
    folder = rel.rsplit("/", 1)[0] + "/"
    subs: dict[str, list[str]] = {}
    for name in source.files_under(folder):
        parts = name[len(folder):].split("/")
        if len(parts) > 1:
            subs.setdefault(parts[0], []).append(name)
    return [n for names in subs.values()
            if any(n.endswith(".json") for n in names)
            and all(n.count("/") == folder.count("/") + 1 and not n.endswith((".py", ".so", ".pyc")) for n in names)
            for n in names if n.endswith(".json")]


_DEVICE_IFS: dict = {}  # (content digest, path in the wheel) -> _device_ifs' answer, for every session of the process


def _device_ifs(digest: str, rel: str, text: str) -> list[tuple[int, str, set[int] | None, set[int]]]:
    """The if/elif blocks and device assignments of a served file whose test is a device or tuned-config test (the
    only ones _branches reports), parsed once per process for each file content."""
    key = (digest, rel)
    if key not in _DEVICE_IFS:
        _DEVICE_IFS[key] = [b for b in _if_blocks(text) if DEVICE_TEST.search(b[1]) or CONFIG_TEST.search(b[1])]
    return _DEVICE_IFS[key]


def _if_blocks(text: str) -> list[tuple[int, str, set[int] | None, set[int]]]:
    """Every if/elif of a file whose test may be a device or tuned-config test: its line, `if <test>` text, its
    body's lines and its (non-elif) else's lines; and every assignment whose value is an expression over the device
    (body None: evaluated when its line ran). A test whose source text (as written, or with its whitespace removed)
    matches neither DEVICE_TEST nor CONFIG_TEST is not unparsed: unparsing only normalises spacing and brackets, so
    such a test's unparsed text matches neither either."""
    out = []
    if not any(rx.search(t) for rx in (DEVICE_TEST, CONFIG_TEST) for t in (text, "".join(text.split()))):
        return out  # no test of the file can match: not parsed
    lines = text.splitlines()

    def maybe(node) -> bool:
        raw = "\n".join(lines[node.lineno - 1:node.end_lineno])
        bare = "".join(raw.split())
        return any(rx.search(t) for rx in (DEVICE_TEST, CONFIG_TEST) for t in (raw, bare))

    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.BoolOp, ast.Compare, ast.IfExp)) \
                and maybe(node.value):
            value = ast.unparse(node.value)
            if DEVICE_TEST.search(value):
                out.append((node.lineno, f"{ast.unparse(node.targets[0])} = {' '.join(value.split())} "
                                         "(evaluated)", None, set()))
        if isinstance(node, ast.If) and maybe(node.test):
            body = set(range(node.body[0].lineno, node.body[-1].end_lineno + 1))
            orelse = set()
            if node.orelse and not (len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If)):
                orelse = set(range(node.orelse[0].lineno, node.orelse[-1].end_lineno + 1))
            out.append((node.lineno, f"if {ast.unparse(node.test)}:", body, orelse))
    return out


@contextlib.contextmanager
def _patched(obj, **values):
    before = {k: obj.__dict__[k] if k in obj.__dict__ else getattr(obj, k) for k in values}
    for k, v in values.items():
        setattr(obj, k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            setattr(obj, k, v)


def _driver(target: Target):
    """triton.runtime.driver's active driver as the target answers it (the fields Triton's CUDA driver reports)."""
    gpu = _compiler.GPUTarget("cuda", target.cc_int, 32)
    props = {"max_shared_mem": target.smem_optin, "multiprocessor_count": target.sms, "warpSize": 32}
    return types.SimpleNamespace(get_current_target=lambda: gpu, get_current_device=lambda: 0,
                                 utils=types.SimpleNamespace(get_device_properties=lambda device=0: dict(props)))


@contextlib.contextmanager
def _active_driver(target: Target):
    config = _driver_config.driver
    before = config.__dict__.get("_active")
    config._active = _driver(target)
    try:
        yield
    finally:
        config._active = before


_open: list = []  # the sessions open now, innermost last


def current() -> Session:
    """The innermost open session (an entry's `arguments`, called inside it, reads the engine release from it)."""
    if not _open:
        raise RuntimeError("tileprobe audit: no engine session is open")
    return _open[-1]


@contextlib.contextmanager
def engine_session(source: EngineSource, target: Target, allow, stand_ins: dict, cache_dir=None, flags=None):
    """A Session whose `module(name)` imports the engine's module from the wheel, under the target's stand-in
    device, recording launches instead of making them (the module docstring); all of it undone on exit."""
    jit_cls, tuner_cls = _jit.JITFunction, _autotuner.Autotuner  # torch and Triton in sys.modules before the snapshot
    torch.cuda.get_device_capability  # noqa: B018
    session = Session(source, target, frozenset(allow), dict(stand_ins),
                      cache_root(cache_dir) / "audit-src" / f"{source.engine}-{source.version}",
                      flags=dict(flags or {}))
    modules_before = dict(sys.modules)
    finder = _Finder(session)

    tuner_init = tuner_cls.__init__

    def autotuner_init(tuner, fn, *args, **kwargs):
        tuner_init(tuner, fn, *args, **kwargs)
        inner = fn
        while not isinstance(inner, jit_cls) and hasattr(inner, "fn"):
            inner = inner.fn
        session._tuners[id(inner)] = tuner

    def jit_run(fn, *args, grid, warmup, **kwargs):
        tuner = session._tuners.get(id(fn)) if session._autotune is None else None
        if tuner is not None:  # the function of an autotuned kernel, launched with a config its caller kept
            picked = {k for c in tuner.configs for k in c.all_kwargs()}
            return autotune_run(tuner, *args, grid=grid, warmup=warmup,
                                **{k: v for k, v in kwargs.items() if k not in picked})
        session.record(fn, args, grid, kwargs)

    def autotune_run(tuner, *args, **kwargs):
        tuner.nargs = dict(zip(tuner.arg_names, args))
        configs = tuner.prune_configs(kwargs) if len(tuner.configs) > 1 else tuner.configs
        try:
            for i, config in enumerate(configs):
                session._autotune = (i, len(configs), len(tuner.configs))
                tuner.fn.run(*args, **kwargs, **config.all_kwargs())
        finally:
            session._autotune = None
            tuner.nargs = None
        tuner.best_config = configs[0]  # benchmarked none; a caller reading it gets one of the configs left

    trace_before = sys.gettrace()
    sys.meta_path.insert(0, finder)
    _open.append(session)
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_patched(torch.cuda, **cuda_answers(target)))
            stack.enter_context(_active_driver(target))
            stack.enter_context(_patched(jit_cls, run=jit_run))
            stack.enter_context(_patched(tuner_cls, run=autotune_run, __init__=autotuner_init))
            sys.settrace(session._trace)
            try:
                yield session
            finally:
                sys.settrace(trace_before)
    finally:
        _open.remove(session)
        sys.meta_path.remove(finder)
        aliases = {n for n, v in session.stand_ins.items() if isinstance(v, Alias)}
        others = {n.split(".")[0] for n in session.stand_ins}  # stand-ins of another distribution's modules
        for name in list(sys.modules):  # the engine's modules go; a library they imported stays (like torch and
            # triton: torch._dynamo, which @torch.compiler.disable imports, registers TORCH_LIBRARYs, once a process)
            if name not in modules_before and name.split(".")[0] in {session.package, *aliases, *others}:
                del sys.modules[name]
        for name, mod in modules_before.items():
            if sys.modules.get(name) is not mod:
                sys.modules[name] = mod
        importlib.invalidate_caches()


def triton_stand_in(target: Target, source: EngineSource) -> dict:
    """A module whose names are the real triton's (vllm.triton_utils answers with the installed Triton)."""
    return {"triton": triton.load(), "tl": tl.load(), "HAS_TRITON": True}
