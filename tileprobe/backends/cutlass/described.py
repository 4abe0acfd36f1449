"""Sizes kept per config: what a sizes-only build's harness printed for each of its configs, so that a config sized
once, in any batch, is not compiled again in another.

`<cache>/described/<config name>-<key>.json`, where the key is the content key of that config's own single-config
sizes build (`build.cache_key` of `BuildRequest("describe", (config,), with_device=False)`: the harness sources, the
flags, the CUTLASS tree, nvcc and the host compiler, an engine's headers, and the config's own tp_configs.inc line at
index 0). A batch's harness prints each config's description from that config's kernel type alone (describe.cuh: a
sizeof and the constants of its own types; nothing depends on the other configs or on the index), so it is what the
config's own build would print (`tests/backends/cutlass/test_described.py` compares the two with the real nvcc).
Only successful descriptions are kept; a build that fails is the build cache's business. Each record keeps the build
that sized it (its cache folder's name and seconds), so a row served from here carries that build's share of the
compile time and its number of configs, as a cached batch would.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tileprobe.backends.cutlass.build import BuildRequest, cache_key
from tileprobe.backends.cutlass.toolchain import CutlassTree, Nvcc
from tileprobe.families import Config

DESCRIBED = "described"
_FIELDS = ("stages", "smem_bytes", "smem_mainloop_bytes", "smem_epilogue_bytes", "cutlass_cap_bytes", "max_threads",
           "min_blocks")


@dataclass(frozen=True)
class Described:
    desc: dict  # the harness's description of the config (its "index" is 0: the config's own build's)
    seconds: float  # this config's share of the build that sized it
    configs: int  # configs that build sized
    build: str  # that build's cache folder


def entry(cache: Path, config: Config, cutlass: CutlassTree, nvcc: Nvcc) -> Path:
    key = cache_key(BuildRequest("describe", (config,), with_device=False), cutlass, nvcc)
    return cache / DESCRIBED / f"{config.name}-{key}.json"


def load(cache: Path, config: Config, cutlass: CutlassTree, nvcc: Nvcc) -> Described | None:
    """The kept description, or None when there is none or it is broken (one warning line; the record is removed
    and the caller sizes the config again)."""
    path = entry(cache, config, cutlass, nvcc)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return _broken(path, f"{type(exc).__name__}: {exc}")
    try:
        rec = json.loads(text)
        desc = rec["desc"]
        missing = [f for f in _FIELDS if not isinstance(desc.get(f), int)]
        if missing or rec["config"] != config.name:
            raise ValueError(f"no {missing[0]}" if missing else f"it names {rec['config']}")
        return Described(desc, float(rec["seconds"]), int(rec["configs"]), str(rec["build"]))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return _broken(path, f"{type(exc).__name__}: {exc}")


def _broken(path: Path, why: str) -> None:
    sys.stderr.write(f"tileprobe: warning: sizes record {path.name} is broken ({why}); sizing it again\n")
    try:
        path.unlink(missing_ok=True)
    except OSError:  # unremovable: store() replaces it after the config is sized again
        pass
    return None


def store(cache: Path, config: Config, cutlass: CutlassTree, nvcc: Nvcc, desc: dict, seconds: float, configs: int,
          build: str) -> None:
    """Keep a config's description (temporary file, then rename: a reader never sees half a record)."""
    path = entry(cache, config, cutlass, nvcc)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"config": config.name, "desc": dict(desc, index=0), "seconds": seconds, "configs": configs, "build": build}
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
