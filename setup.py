"""The package list, by discovery: every package under tileprobe/ (families, predict, and any added later) plus the
harness sources (cutlass_harness/, installed inside the package as tileprobe.cutlass_harness so that a plain
`pip install /path/to/tileprobe` can build harnesses). Everything else is in pyproject.toml."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["tileprobe", "tileprobe.*"]), "tileprobe.schemas", "tileprobe.cutlass_harness"],
    package_dir={"tileprobe.cutlass_harness": "cutlass_harness"},
)
