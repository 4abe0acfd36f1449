"""report.md's SharedStorage charts kept by content key, so a report drawn again from the same rows copies its PNGs
instead of importing matplotlib and drawing them (a second identical `tileprobe audit` writes the same report.md and
the same chart bytes; matplotlib's Agg PNG holds no date).

The key (a sha256, Triton's runtime cache's way) covers everything a chart's bytes depend on:
- what is drawn: each bar's fields as tileprobe.reports.plots.smem_chart reads them (plots.chart_inputs), the limit,
  the title, the x label, the bar names and the resolution;
- the drawing code: the bytes of tileprobe/reports/plots.py and of this module, and this cache's FORMAT;
- the drawing libraries: matplotlib's version and its installed files (the sha256 of its dist-info RECORD, which
  lists every file's hash), the same of every library it requires, transitively (numpy, Pillow, ...:
  content_key.closure), Python's version, and the MPL* environment variables.

matplotlib's own settings can come from a matplotlibrc outside its package (MATPLOTLIBRC, ./matplotlibrc, the
config folder's matplotlibrc) and name fonts tileprobe does not see: where such a file exists nothing is kept or
served (drawn every time). A cache that cannot be read or written is a chart drawn again, never a failed report.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from tileprobe import content_key

FORMAT = 1
FOLDER = "report-charts"
_HERE = Path(__file__).resolve().parent


def _config_dir() -> Path:
    if os.environ.get("MPLCONFIGDIR"):
        return Path(os.environ["MPLCONFIGDIR"])
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "matplotlib"


def _rc_outside() -> bool:
    """Whether matplotlib would read a matplotlibrc other than its own (its search order, matplotlib_fname)."""
    env = os.environ.get("MATPLOTLIBRC")
    if env and (Path(env).is_file() or (Path(env) / "matplotlibrc").is_file()):
        return True
    try:
        return Path("matplotlibrc").is_file() or (_config_dir() / "matplotlibrc").is_file()
    except OSError:
        return True


def key(kind: str, inputs: dict) -> str | None:
    """The key of a chart drawn from `inputs` (JSON-able), or None: not kept here (no matplotlib, or a matplotlibrc
    of its own)."""
    mpl = content_key.distribution("matplotlib")
    if mpl is None or _rc_outside():
        return None
    return content_key.digest({"format": FORMAT, "kind": kind, "inputs": inputs,
                               "code": content_key.files(_HERE / "plots.py", _HERE / "chart_cache.py"),
                               "matplotlib": mpl, "libraries": content_key.closure("matplotlib"), "python": sys.version,
                               "env": content_key.env("MPL")})


def _path(cache: Path, k: str) -> Path:
    return Path(cache) / FOLDER / k[:2] / f"{k}.png"


def has(cache: Path | None, k: str | None) -> bool:
    return cache is not None and k is not None and _path(cache, k).is_file()


def fetch(cache: Path | None, k: str | None, out: Path) -> bool:
    """The chart of key `k` copied to `out`; False when there is none (or it cannot be read)."""
    if not has(cache, k):
        return False
    try:
        shutil.copyfile(_path(cache, k), out)
    except OSError:
        return False
    return True


def store(cache: Path | None, k: str | None, drawn: Path) -> None:
    """Keep the chart just drawn at `drawn` under key `k`."""
    if cache is not None and k is not None:
        try:
            content_key.write_whole(_path(cache, k), Path(drawn).read_bytes())
        except OSError:
            pass
