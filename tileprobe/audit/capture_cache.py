"""The audit's capture cache: what an entry's capture found (tileprobe.audit.capture: the engine's launchers run from
its wheel under the target's stand-in device) and the engine's attention backend selection (tileprobe.audit.backends),
kept by content key under <cache root>/audit-capture, so a second identical audit neither imports the engine's modules
nor runs its launchers or its selection again.

The key (Triton's runtime cache's way: a sha256 over everything the result depends on, `fingerprint` plus the
entry's own inputs) covers:
- the engine: its release, kind and origin (a loader stub names the wheel's path), and its content: for a wheel, every
  member's name, CRC-32 and size from the zip's central directory (zipfile checks each CRC as it reads a member, so
  this is what the capture can read; any file of the wheel changed, added or removed is another key, whether or not
  the release's manifest lists it: the tuned-config JSON beside a module is not listed and still decides launches);
  for an installed engine, each file's path, size and mtime;
- the wheels tileprobe may serve a declared dependency from (tileprobe.engines.locate.wheel_dirs: name, size, mtime;
  the selection serves the FlashInfer release vLLM pins from there), and the distributions installed here (their
  dist-info names, versions included; torch's and Triton's versions once more by name);
- tileprobe itself: its version and the sha256 of every file of the tileprobe package (the entries, stand-ins,
  manifests, target profiles, the capture and the job code: any edit is another key), and this cache's FORMAT;
- Python's version, and the environment variables the engines' code and the libraries under it read (ENV_PREFIXES:
  VLLM_*, SGLANG_*, FLASHINFER_*, CUDA_*, TRITON_*, TORCH_*, ...; other variables do not reach the key), and the
  files of the tuned-config folder VLLM_TUNED_CONFIG_FOLDER / SGLANG_MOE_CONFIG_DIR names (ENV_FOLDERS: each
  file's name and sha256; the engine's own lookup reads them);
- per entry: its name, the target (every field of its profile, the device name the engine sees included), the
  model's AttentionConfig (every field), the points (batch, sequence length, tp, window, phase), the capability, and
  every audit option but those that cannot reach the capture (out, jobs, command, policy, kernels, rules_off,
  cache_dir: OPTIONS_NOT_KEYED); per selection: the target, the model and the forced backend.

What is stored is plain data (JSON): the launches (capture.Launch, with capture.TensorArg), their compile jobs
(KernelJob with its KernelSource, each source text once per file), the points, the not-selected answers
(entry.Elsewhere), the autotune groups, and the message of a capture that failed with one of run.CAPTURE_ERRORS
(partial results kept, as an uncached capture keeps them). A launch argument that is an engine's IntEnum member (vLLM's
KVQuantMode) is rebuilt as a member of an IntEnum of the same name, module and members, so it compares, prints and
converts as the engine's did; a value of any other type makes the entry's capture uncached (computed every time,
never guessed). The live objects of a session (its @triton.jit functions) are not kept: a compile that needs the
kernel object imports it again in a session of its own (tileprobe.audit.loader), as it does uncached.

`memo(kind, source, inputs, cache_dir, compute)` keeps another plain answer the same way (the selection is one), for
a step of the audit that runs the engine's own code on every run.

Entries are written whole (a temporary file renamed over the entry: processes writing the same key at once write
the same text, the last rename wins; no lock is needed). An entry that cannot be read back (truncated, not JSON, a
field missing, another key inside) is one warning line and is computed again and rewritten, never a crash.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
from pathlib import Path
from typing import Callable

import tileprobe
from tileprobe.audit.capture import Launch, TensorArg, write_whole
from tileprobe.audit.entry import Elsewhere, Point
from tileprobe.audit.selection import Selection
from tileprobe.backends.triton.compile import KernelJob
from tileprobe.backends.triton.source import KernelSource
from tileprobe.backends.triton.toolchain import cache_root
from tileprobe.engines import locate, wheel_zip

FORMAT = 1
FOLDER = "audit-capture"
ENV_PREFIXES = ("VLLM_", "SGLANG_", "SGL_", "FLASHINFER_", "CUDA_", "NVIDIA_", "TRITON_", "TORCH_", "PYTORCH_",
                "HF_", "TRANSFORMERS_", "LOCAL_RANK", "RANK", "WORLD_SIZE")
# variables naming a folder of tuned configs the engine's own lookup reads (vLLM's get_moe_configs, SGLang's fused MoE
# config lookup): the files in it are inputs too (`tileprobe export triton-configs` writes them, the audit is run again)
ENV_FOLDERS = ("VLLM_TUNED_CONFIG_FOLDER", "SGLANG_MOE_CONFIG_DIR")
OPTIONS_NOT_KEYED = ("out", "jobs", "command", "policy", "kernels", "rules_off", "cache_dir")
_CLASSES = {c.__name__: c for c in (Launch, TensorArg, KernelJob, KernelSource, Point, Elsewhere, Selection)}


@dataclasses.dataclass
class EntryCapture:
    """One entry's capture, without the entry: plans (launch, job, points), not-selected answers (elsewhere,
    points), autotune groups (kernel, call site, configs listed, indices into plans) and the failure, if any."""

    plans: list = dataclasses.field(default_factory=list)
    others: list = dataclasses.field(default_factory=list)
    tuned: list = dataclasses.field(default_factory=list)
    failed: str | None = None


class _Unstorable(Exception):
    """A value the cache does not keep as plain data."""


# --- the key ---------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def _tileprobe_files() -> str:
    root = Path(tileprobe.__file__).resolve().parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo") or not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:  # gone since the listing (an editor's temporary file): not part of the package
            continue
        h.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def _installed() -> str:
    names = set()
    for entry in sys.path:
        try:
            names |= {n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))}
        except OSError:
            continue
    return hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _wheels() -> list:
    out = []
    for d in locate.wheel_dirs():
        try:
            found = sorted(p for p in Path(d).iterdir() if p.name.endswith(".whl"))
        except OSError:
            continue
        for p in found:
            try:
                st = p.stat()
            except OSError:  # gone since the listing (another process's download, renamed)
                continue
            out.append([str(p), st.st_size, st.st_mtime_ns])
    return out


def engine_content(src) -> str:
    """The content identity of the engine's files (the module docstring): a wheel by its central directory (read
    once per process while the file's size, mtime and inode stay), an installed package by its files' stat."""
    if src.kind == "wheel":
        st = os.stat(src.origin)
        return _wheel_content(str(src.origin), st.st_size, st.st_mtime_ns, st.st_ino)
    root = Path(src.origin)
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            st = path.stat()
            h.update(f"{path.relative_to(root).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=8)
def _wheel_content(origin: str, *stat) -> str:
    # the ZipFile the engine's reads share (EngineSource, the manifest check): its central directory is read once
    listing = "\n".join(f"{i.filename}\0{i.CRC}\0{i.file_size}" for i in wheel_zip.open_zip(origin).infolist())
    return hashlib.sha256(listing.encode()).hexdigest()


def _folder(path: str) -> list:
    """The files of a tuned-config folder (or the file) an ENV_FOLDERS variable names: name and sha256 each."""
    p = Path(path)
    try:
        files = [p] if p.is_file() else sorted(f for f in p.iterdir() if f.is_file()) if p.is_dir() else []
        return [[f.name, hashlib.sha256(f.read_bytes()).hexdigest()] for f in files]
    except OSError as exc:
        return [f"unreadable: {type(exc).__name__}"]


def fingerprint(src) -> dict:
    """The inputs every key of this process and engine shares."""
    return {"format": FORMAT, "tileprobe": [tileprobe.__version__, _tileprobe_files()],
            "python": sys.version, "installed": _installed(),
            "torch": _version("torch"), "triton": _version("triton"),
            "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
            "env_folders": {k: _folder(os.environ[k]) for k in ENV_FOLDERS if os.environ.get(k)},
            "engine": {"engine": src.engine, "version": src.version, "origin": str(src.origin), "kind": src.kind,
                       "content": engine_content(src)},
            "wheels": _wheels()}


def _keyed(doc: dict) -> tuple[str, str]:
    """The key of an inputs document, and the document as stored beside the value (to see why a key changed)."""
    text = json.dumps(doc, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest(), text


def _options(opts) -> dict:
    return {f.name: getattr(opts, f.name) for f in dataclasses.fields(opts) if f.name not in OPTIONS_NOT_KEYED}


# --- plain data ----------------------------------------------------------------------------------------------------
class _Codec:
    """Values to JSON and back: tuples, dicts, the allowed dataclasses and IntEnum members tagged; each KernelSource
    once (by index)."""

    def __init__(self, sources: list | None = None) -> None:
        self.sources = sources if sources is not None else []
        self._index: dict = {}
        self._enums: dict = {}

    def enc(self, v):
        t = type(v)
        if v is None or t in (bool, int, float, str):
            return v
        if t is list:
            return [self.enc(x) for x in v]
        if t is tuple:
            return {"t": [self.enc(x) for x in v]}
        if t is dict:
            return {"d": [[self.enc(k), self.enc(x)] for k, x in v.items()]}
        if t is KernelSource:
            key = (v.function, v.text, v.origin)
            if key not in self._index:
                self._index[key] = len(self.sources)
                self.sources.append([v.text, v.function, v.origin])
            return {"s": self._index[key]}
        if _CLASSES.get(t.__name__) is t:
            return {"c": [t.__name__, {f.name: self.enc(getattr(v, f.name)) for f in dataclasses.fields(v)}]}
        if isinstance(v, enum.IntEnum):
            return {"e": [t.__module__, t.__qualname__, [[m.name, int(m.value)] for m in t], v.name]}
        raise _Unstorable(f"{t.__module__}.{t.__qualname__}")

    def dec(self, v):
        if v is None or type(v) in (bool, int, float, str):
            return v
        if type(v) is list:
            return [self.dec(x) for x in v]
        (tag, body), = v.items()
        if tag == "t":
            return tuple(self.dec(x) for x in body)
        if tag == "d":
            return {self.dec(k): self.dec(x) for k, x in body}
        if tag == "s":
            text, function, origin = self.sources[body]
            return KernelSource(text, function, origin)
        if tag == "c":
            name, fields = body
            return _CLASSES[name](**{k: self.dec(x) for k, x in fields.items()})
        if tag == "e":
            module, qualname, members, name = body
            key = (module, qualname, tuple(map(tuple, members)))
            if key not in self._enums:
                self._enums[key] = enum.IntEnum(qualname.rsplit(".", 1)[-1], [tuple(m) for m in members],
                                                module=module, qualname=qualname)
            return self._enums[key][name]
        raise ValueError(f"unknown tag {tag!r}")


# --- the store -----------------------------------------------------------------------------------------------------
def _path(cache_dir, key: str) -> Path:
    return cache_root(cache_dir) / FOLDER / key[:2] / f"{key}.json"


_MISS = object()  # _read's answer when there is no usable entry


def _read(path: Path, key: str, kind: str):
    """The stored document's `value`, or _MISS (absent; broken: one warning line, and the caller computes it)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return _MISS
    except OSError as exc:
        return _broken(path, f"{type(exc).__name__}: {exc}")
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key \
                or doc.get("kind") != kind:
            raise ValueError("not an entry of this key")
        codec = _Codec(list(doc["sources"]))
        return codec.dec(doc["value"])
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        return _broken(path, f"{type(exc).__name__}: {exc}")


def _broken(path: Path, why: str):
    sys.stderr.write(f"tileprobe: warning: audit capture cache entry {path.name[:16]} is broken ({why}); "
                     "computing it again\n")
    return _MISS


def _write(path: Path, key: str, kind: str, inputs: str, value) -> bool:
    codec = _Codec()
    try:
        body = codec.enc(value)
    except _Unstorable:
        return False
    doc = {"format": FORMAT, "key": key, "kind": kind, "inputs": json.loads(inputs), "sources": codec.sources,
           "value": body}
    try:
        write_whole(path, json.dumps(doc, separators=(",", ":")))
    except OSError:  # a cache that cannot be written is a slower next run, not a failed audit
        return False
    return True


class Store:
    """The capture cache of one audit: the key parts it shares, computed once."""

    def __init__(self, src, target, model, opts, cc: int) -> None:
        self.cache_dir = opts.cache_dir
        self.base = {"fingerprint": fingerprint(src), "target": dataclasses.asdict(target),
                     "model": dataclasses.asdict(model), "cc": cc, "options": _options(opts)}

    def _key(self, k, points) -> tuple[str, str]:
        return _keyed({**self.base, "entry": k.name, "points": [dataclasses.asdict(p) for p in points],
                       "kind": "capture"})

    def get(self, k, points) -> EntryCapture | None:
        key, _ = self._key(k, points)
        value = _read(_path(self.cache_dir, key), key, "capture")
        if value is _MISS:
            return None
        try:
            return EntryCapture(**value)
        except TypeError as exc:
            _broken(_path(self.cache_dir, key), f"TypeError: {exc}")
            return None

    def put(self, k, points, got: EntryCapture) -> bool:
        key, inputs = self._key(k, points)
        value = {f.name: getattr(got, f.name) for f in dataclasses.fields(got)}
        return _write(_path(self.cache_dir, key), key, "capture", inputs, value)


def memo(kind: str, src, inputs: dict, cache_dir, compute: Callable[[], object]):
    """`compute()`'s value (plain data: what _Codec stores), from the cache when computed before for the same engine
    files, tileprobe, host (fingerprint) and `inputs` (JSON-able: the target's and model's fields, the options, as
    the caller's value depends on them); else computed and stored. A value that raises is not cached; a value the
    codec does not keep is returned, uncached. For a step of the audit that runs the engine's own code from its wheel
    on every run (the attention backend selection here)."""
    key, text = _keyed({"fingerprint": fingerprint(src), **inputs, "kind": kind})
    path = _path(cache_dir, key)
    got = _read(path, key, kind)
    if got is not _MISS:
        return got
    value = compute()
    _write(path, key, kind, text, value)
    return value


def selection(src, target, model, forced: str | None, cache_dir, select: Callable[[], Selection]) -> Selection:
    """The engine's attention backend selection (`select()`), from the cache when its key was computed before; a
    selection that raises is not cached."""
    got = memo("selection", src, {"target": dataclasses.asdict(target), "model": dataclasses.asdict(model),
                                  "forced": forced}, cache_dir, select)
    return got if isinstance(got, Selection) else select()
