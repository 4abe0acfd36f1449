"""The serving engines' Triton fused-MoE configs, read without importing the engine.

An engine (vLLM, SGLang) is found by tileprobe.engines.locate.find_release: a wheel read as a zip (`--engine-wheel
PATH`), else the installed package (nothing of it runs), else a wheel cached in $TILEPROBE_ENGINE_WHEELS or the user
cache dir (`<cache>/wheels`, where `tileprobe engines fetch` puts it). From it this module reads two things:

- the kernel file's source text (tileprobe.backends.triton.source cuts the standalone module Triton compiles), and
- the config trees: JSON files named `E=..,N=..,device_name=..[,dtype=..][,block_shape=..]...json`, each mapping a
  batch size M to one kernel config (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps, num_stages, ...).

The engine-specific parts (where the files are, how names are spelled, how a config is looked up) are in
tileprobe/engines/vllm.py and tileprobe/engines/sglang.py; this module holds what both share. Nothing here needs
Triton, torch or a GPU.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tileprobe.backends.cutlass.toolchain import package_dir
from tileprobe.engines import locate
from tileprobe.engines.locate import PINNED, WHEELS_ENV, wheel_dirs  # noqa: F401  (re-exported; their home is locate)
from tileprobe.engines import wheel_zip
from tileprobe.errors import UsageError

ENGINES = ("vllm", "sglang")


# ----------------------------------------------------------------------------------------------------------------
# Where an engine's files come from
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineSource:
    """One engine release's files: an installed package (root = its site-packages folder) or a wheel (a zip)."""

    engine: str  # "vllm" | "sglang"
    version: str
    origin: str  # the wheel file, or the installed package folder
    kind: str  # "installed" | "wheel"

    def label(self) -> str:
        return f"{self.engine} {self.version}"

    def _root(self) -> Path:
        return Path(self.origin).parent  # the folder that holds the package folder

    def read_text(self, rel: str) -> str:
        """The text of `rel` (a path from the package's parent, e.g. 'vllm/envs.py'); UsageError when missing."""
        if self.kind == "wheel":
            if rel not in wheel_zip.names(self.origin):
                raise UsageError(f"{self.label()} ({self.origin}) has no {rel}")
            return wheel_zip.open_zip(self.origin).read(rel).decode("utf-8", errors="replace")
        path = self._root() / rel
        if not path.is_file():
            raise UsageError(f"{self.label()} ({self.origin}) has no {rel}")
        return path.read_text(errors="replace")

    def files_under(self, rel_dir: str) -> list[str]:
        """Every file below `rel_dir` (paths from the package's parent, sorted)."""
        prefix = rel_dir.rstrip("/") + "/"
        if self.kind == "wheel":
            return list(wheel_zip.under(self.origin, prefix))
        base = self._root() / rel_dir
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self._root())) for p in base.rglob("*") if p.is_file())


def _check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise UsageError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")


def _wheel_version(path: Path, engine: str) -> str:
    """The version in the wheel's own METADATA; UsageError when the file is not a wheel of `engine`."""
    try:
        names = wheel_zip.names(str(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise UsageError(f"--engine-wheel {path}: not a readable wheel ({exc})") from None
    metas = [n for n in names if re.fullmatch(rf"{engine}-[^/]+\.dist-info/METADATA", n)]
    if not metas or not any(n.startswith(f"{engine}/") for n in names):
        raise UsageError(f"--engine-wheel {path}: not a {engine} wheel (no {engine}/ package and "
                         f"{engine}-*.dist-info/METADATA in it)")
    text = wheel_zip.open_zip(str(path)).read(metas[0]).decode("utf-8", errors="replace")
    m = re.search(r"^Version:\s*(\S+)\s*$", text, re.M)
    if not m:
        raise UsageError(f"--engine-wheel {path}: its METADATA has no Version line")
    return m.group(1)


def cached_wheel(engine: str) -> Path | None:
    """A cached wheel of `engine`: the pinned release when there, else the newest by version."""
    found = [p for p in locate.releases(engine) if p.wheel is not None]
    pkg = next((p for p in found if p.version == PINNED.get(engine)), None) or \
        max(found, key=lambda p: locate.version_key(p.version), default=None)
    return pkg.wheel if pkg is not None else None


def find_engine(engine: str, wheel: str | Path | None = None) -> EngineSource:
    """The engine's files: `wheel` (a wheel or a folder of them) when given, else the installed package, else a
    cached wheel (locate.find_release). Never imports it."""
    _check_engine(engine)
    pkg = locate.find_release(engine, None, wheel)
    if pkg.wheel is not None:
        path = Path(pkg.wheel).resolve()
        return EngineSource(engine, _wheel_version(path, engine), str(path), "wheel")
    folder = package_dir(engine) or Path(pkg.install) / engine
    if not (folder / "__init__.py").is_file():
        raise UsageError(f"{engine} {pkg.version} is installed ({pkg.install}) but has no {engine}/__init__.py there")
    return EngineSource(engine, pkg.version, str(folder.resolve()), "installed")


# ----------------------------------------------------------------------------------------------------------------
# Config files
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConfigName:
    """What a config file's name says: the problem (E experts, per-shard N), the device it was tuned on, the scheme."""

    E: int
    N: int
    device_name: str  # as spelled in the file name (the engine's replacements applied)
    dtype: str | None = None  # fp8_w8a8, int8_w8a16, ... (None: bf16/fp16)
    block_shape: tuple[int, int] | None = None  # [block_n, block_k] of block-wise quantization
    per_channel_quant: bool = False  # SGLang only
    down: bool = False  # SGLang only: the down-projection (second GEMM) file
    backend: str | None = None  # vLLM only: ',backend=flydsl' files are not for the Triton kernel

    @property
    def is_triton(self) -> bool:
        return self.backend is None


_NAME_RE = re.compile(
    r"E=(?P<E>\d+),N=(?P<N>\d+),device_name=(?P<dev>.+?)"
    r"(?:,dtype=(?P<dtype>[A-Za-z0-9_]+?))?"
    r"(?:,block_shape=\[(?P<bn>\d+), ?(?P<bk>\d+)\])?"
    r"(?P<pcq>,per_channel_quant=True)?"
    r"(?:,backend=(?P<backend>[A-Za-z0-9_]+))?"
    r"(?P<down>_down)?\.json")


def parse_name(file_name: str) -> ConfigName | None:
    """The fields of an engine config file name; None when the name is not one (README, other kernels' JSON)."""
    m = _NAME_RE.fullmatch(file_name)
    if not m:
        return None
    bs = (int(m["bn"]), int(m["bk"])) if m["bn"] else None
    return ConfigName(int(m["E"]), int(m["N"]), m["dev"], m["dtype"], bs, bool(m["pcq"]), bool(m["down"]),
                      m["backend"])


@dataclass(frozen=True)
class ConfigFile:
    """One config file: its name's fields and its entries, M -> config, in the file's own key order (the engine's
    nearest-M lookup breaks ties by that order)."""

    engine: str
    name: ConfigName
    path: str  # where it was read (a file path, or wheel!member)
    rel: str  # its path inside the tree it was read from (e.g. 'triton_3_8_0/E=...json' for SGLang)
    entries: dict[int, dict]
    triton_dir: str | None = None  # SGLang: the configs/triton_X_Y_Z folder it sits in
    triton_version: str | None = None  # a vLLM file's own "triton_version" key, when present

    @property
    def file_name(self) -> str:
        return self.rel.rsplit("/", 1)[-1]


def parse_entries(text: str, where: str, engine: str) -> tuple[dict[int, dict], str | None]:
    """The M -> config entries of one file's JSON text. Malformed → UsageError with one line naming `where`.

    vLLM drops a "triton_version" key before reading the rest (get_moe_configs); SGLang reads every key as an int.
    A config entry of the Triton kernel must be an object with integer BLOCK_SIZE_M/N/K and GROUP_SIZE_M.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: malformed config JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{where}: malformed config JSON: expected an object of batch size -> config, "
                         f"got {type(doc).__name__}")
    triton_version = doc.pop("triton_version", None) if engine == "vllm" else None
    entries: dict[int, dict] = {}
    for key, value in doc.items():
        try:
            m = int(key)
        except ValueError:
            raise UsageError(f"{where}: malformed config JSON: key {key!r} is not a batch size "
                             f"({engine} reads every key with int())") from None
        if not isinstance(value, dict):
            raise UsageError(f"{where}: malformed config JSON: entry {key!r} is not an object")
        entries[m] = value
    return entries, (str(triton_version) if triton_version is not None else None)


def read_file(path: Path, engine: str, rel: str | None = None, triton_dir: str | None = None) -> ConfigFile:
    """One config file from disk; UsageError when its name is not an engine config name or its JSON is malformed."""
    name = parse_name(path.name)
    if name is None:
        raise UsageError(f"{path}: not a fused-MoE config file name (expected E=..,N=..,device_name=..[,dtype=..]"
                         "[,block_shape=[..]].json)")
    try:
        text = path.read_text()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    entries, tv = parse_entries(text, str(path), engine)
    return ConfigFile(engine, name, str(path), rel or path.name, entries, triton_dir, tv)


def read_tree(path: Path, engine: str) -> list[ConfigFile]:
    """Every config file in a user's file or folder (recursively; a folder named triton_X_Y_Z marks SGLang's version
    layout). Files whose names are not config names are skipped; a folder holding none is an error."""
    path = Path(path)
    if path.is_file():
        return [read_file(path, engine, triton_dir=_triton_dir_of(path.parent.name))]
    if not path.is_dir():
        raise UsageError(f"{path}: no such file or folder")
    out = []
    for p in sorted(path.rglob("*.json")):
        if parse_name(p.name) is None:
            continue
        out.append(read_file(p, engine, rel=str(p.relative_to(path)), triton_dir=_triton_dir_of(p.parent.name)))
    if not out:
        raise UsageError(f"{path}: holds no fused-MoE config files (E=..,N=..,device_name=...json)")
    return out


def _triton_dir_of(folder: str) -> str | None:
    return folder if re.fullmatch(r"triton_\d+(?:_\d+)+", folder) else None


def read_source_tree(src: EngineSource, configs_rel: str) -> list[ConfigFile]:
    """Every config file the engine ships under `configs_rel` (paths from the package's parent)."""
    return [read_source_tree_file(src, configs_rel, rel) for rel in src.files_under(configs_rel)
            if parse_name(rel.rsplit("/", 1)[-1]) is not None]


# ----------------------------------------------------------------------------------------------------------------
# Nearest key: the lookup both engines use on a file's entries
# ----------------------------------------------------------------------------------------------------------------


def nearest_key(keys: list[int], m: int) -> int:
    """`min(configs.keys(), key=lambda x: abs(x - M))`, as both engines write it: ties go to the key that comes
    first in the file's order (not the smaller one)."""
    best = keys[0]
    for k in keys[1:]:
        if abs(k - m) < abs(best - m):
            best = k
    return best


def read_source_tree_file(src: EngineSource, configs_rel: str, rel: str) -> ConfigFile:
    """One shipped config file (`rel` from the package's parent, below `configs_rel`)."""
    inner = rel[len(configs_rel.rstrip("/")) + 1:]
    name = parse_name(inner.rsplit("/", 1)[-1])
    if name is None:
        raise UsageError(f"{rel}: not a fused-MoE config file name")
    parent = inner.rsplit("/", 1)[0] if "/" in inner else ""
    where = f"{src.origin}!{rel}" if src.kind == "wheel" else str(Path(src.origin).parent / rel)
    entries, tv = parse_entries(src.read_text(rel), where, src.engine)
    return ConfigFile(src.engine, name, where, inner, entries, _triton_dir_of(parent), tv)


# ----------------------------------------------------------------------------------------------------------------
# Schemes (which file a launch reads) and what a lookup found
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Scheme:
    """A quantization scheme as the engines' config lookup sees it: the dtype string, block_shape, per-channel."""

    name: str  # tileprobe's name: bf16, fp8, fp8-block, fp8-channel
    dtype: str | None
    block_shape: tuple[int, int] | None = None
    per_channel: bool = False


SCHEMES: dict[str, Scheme] = {s.name: s for s in (
    Scheme("bf16", None),
    Scheme("fp8", "fp8_w8a8"),  # fp8 w8a8, per-tensor scales
    Scheme("fp8-block", "fp8_w8a8", (128, 128)),  # fp8 w8a8, [128, 128] block scales (DeepSeek-style)
    Scheme("fp8-channel", "fp8_w8a8", None, True),  # fp8 w8a8, per-channel weights / per-token activations
)}


def scheme(name: str) -> Scheme:
    try:
        return SCHEMES[name]
    except KeyError:
        raise UsageError(f"unknown --quant {name!r}: the engines' Triton fused_moe_kernel configs tileprobe sizes "
                         f"are {', '.join(SCHEMES)}") from None


def scheme_of(name: ConfigName) -> Scheme | None:
    """The scheme a file is for, or None when tileprobe does not size it (int8/int4, other block shapes, flydsl)."""
    if not name.is_triton:
        return None
    for s in SCHEMES.values():
        if s.dtype == name.dtype and s.block_shape == name.block_shape and s.per_channel == name.per_channel_quant:
            return s
    return None


@dataclass(frozen=True)
class Loaded:
    """What an engine's get_moe_configs found for one GEMM: a file (from the user's folder or shipped), or nothing
    (source 'default': the default heuristic runs), or an error the engine itself would raise ('engine-error')."""

    source: str  # "user" | "shipped" | "default" | "engine-error"
    path: str | None
    file: ConfigFile | None
    tried: tuple[str, ...]  # every path the engine looked at, in order
    note: str = ""
