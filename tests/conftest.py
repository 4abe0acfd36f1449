import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest

from _session_draw import session_seed
from tileprobe.backends.cutlass.toolchain import find_cutlass, find_nvcc


# pytester: tests/test_pytest_plugin.py runs the tileprobe plugin in throwaway pytest sessions. The plugin itself
# (--tileprobe-known-good) is loaded from its pytest11 entry point once tileprobe is installed.
pytest_plugins = ["pytester"]


def pytest_configure(config):
    """One build cache for the whole test session, so each harness compiles once and every test that needs it (the
    `toolchain` fixture, the wheel-install test, CLI subprocesses) shares it: TILEPROBE_TEST_CACHE if the caller names
    one, else a fresh folder (cold, like a fresh clone's). Entries are only served when their content key matches
    (sources, headers, nvcc, flags: build.cache_key), so sharing weakens nothing. TILEPROBE_CACHE_DIR follows it for
    subprocesses unless set; a test about the cache itself passes its own --cache-dir."""
    if not os.environ.get("TILEPROBE_TEST_CACHE"):
        os.environ["TILEPROBE_TEST_CACHE"] = _OWN_CACHE[0] = tempfile.mkdtemp(prefix="tileprobe-test-cache-")
    os.environ.setdefault("TILEPROBE_CACHE_DIR", os.environ["TILEPROBE_TEST_CACHE"])
    session_seed()  # the session's draws (tests/_session_draw.py): drawn here, before the xdist workers start
    _session_bytecode()
    config.addinivalue_line("markers", "engine_wheels(flashinfer=False): reads the pinned vLLM / SGLang wheels (and, "
                                       "with flashinfer=True, the flashinfer releases they pin): fetched into the "
                                       "wheel cache when such a test is selected and not skipped")


_OWN_CACHE = [None]  # the session cache this process made (removed at the end); a caller's is left alone
_OWN_PYCACHE = [None]


def _session_bytecode() -> None:
    """With PYTHONDONTWRITEBYTECODE set (as on this project's machines), every Python the suite starts (the CLI in
    a few hundred subprocesses, the xdist workers, Ray's workers) would compile tileprobe's ~90 modules from source
    again: about 0.1 s of a CLI start's 0.3 s. Their bytecode goes to one folder of this session instead
    (PYTHONPYCACHEPREFIX, removed at the end), so the checkout still gets none and each module is compiled once.
    Nothing a test checks depends on it; `python -I` subprocesses (the installed-wheel test) ignore both variables."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not os.environ.get("PYTHONPYCACHEPREFIX"):
        os.environ.pop("PYTHONDONTWRITEBYTECODE")
        os.environ["PYTHONPYCACHEPREFIX"] = _OWN_PYCACHE[0] = tempfile.mkdtemp(prefix="tileprobe-test-pycache-")


def pytest_unconfigure(config):
    for own in (_OWN_CACHE[0], _OWN_PYCACHE[0]):
        if own:
            shutil.rmtree(own, ignore_errors=True)


def _has_gpu() -> bool:
    try:
        from tileprobe.targets import query_devices

        return bool(query_devices())
    except Exception:
        return False


def _mark_engine_wheels(items) -> None:
    """The tests that read the engines' wheels get the engine_wheels marker (a test may also carry it itself): the
    triton-moe tests read vLLM's and SGLang's kernels and config trees from their wheels, and test_blocklist_engines
    also loads the flashinfer releases those engines pin from theirs (never installed)."""
    for item in items:
        if item.get_closest_marker("engine_wheels") is None:
            if "test_blocklist_engines" in item.nodeid:
                item.add_marker(pytest.mark.engine_wheels(flashinfer=True))
            elif "triton" in item.nodeid:
                item.add_marker(pytest.mark.engine_wheels)


def _wheels_wanted(items) -> tuple[bool, bool]:
    """(engines, flashinfer): whether a test that will run (selected, not skipped by a mark: a `gpu` test on a
    machine without one is) reads the engine wheels, and the flashinfer pins."""
    marks = [m for item in items if item.get_closest_marker("skip") is None
             for m in [item.get_closest_marker("engine_wheels")] if m is not None]
    return bool(marks), any(m.kwargs.get("flashinfer") for m in marks)


def _fetch_engine_wheels(items) -> None:
    """On a fresh machine, fetch the pinned wheels the selected tests read (engine_wheels) into tileprobe's wheel
    cache once (tileprobe.engines.fetch, the same code as `tileprobe engines fetch`), so those tests run instead of
    skipping; nothing when no selected test reads them (a `-m gpu` run of other tests never reaches for the network).
    A failed download is said here; the tests then skip, naming why."""
    engines, flashinfer = _wheels_wanted(items)
    if not engines:
        return
    from tileprobe.engines import fetch, triton_configs
    from tileprobe.errors import UsageError

    wanted = []
    for engine, version in triton_configs.PINNED.items():
        try:
            triton_configs.find_engine(engine)
        except UsageError:
            wanted.append((engine, version))
    if flashinfer and not os.environ.get("TILEPROBE_WHEELS"):
        wanted += [(w.dist, w.version) for w in fetch.plan() if w.pinned_by and w.version]  # the engines' pins
    for dist, version in wanted:
        try:
            print(f"wheel cache: {fetch.download(dist, version)}")
        except UsageError as exc:
            print(f"warning: {exc}; the tests that read {dist} {version} will skip")


COMPILER_MARKS = ("nvcc", "triton")


def compilers_first(items) -> None:
    """Put the files that run a real compiler (a test marked nvcc or triton: about three quarters of the suite's time
    in a sixth of its tests) before the others, each file whole and in its own order. Under pyproject's `--dist
    loadfile` a file is one xdist work unit and a worker takes the next file when its current one is nearly done,
    so the long files start first and the short ones fill both workers' ends; a compile-heavy first chunk no longer
    leaves one worker on it while the other finishes the rest. It changes the order only: every test runs."""
    heavy = {item.path for item in items if any(m in item.keywords for m in COMPILER_MARKS)}
    items.sort(key=lambda item: item.path not in heavy)  # stable: files keep their order, tests theirs


def pytest_collection_modifyitems(config, items):
    compilers_first(items)
    _mark_engine_wheels(items)
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_collection_finish(session):
    """After -m / -k deselection (pytest_collection_modifyitems sees every collected test): the wheels the tests that
    will run need."""
    _fetch_engine_wheels(session.items)


@pytest.fixture(scope="session")
def toolchain(tmp_path_factory):
    """The real nvcc and CUTLASS (CI has both: nvcc on PATH, CUTLASS inside the pinned flashinfer wheel), and the
    session's one build cache (pytest_configure)."""
    from tileprobe.sweep import Toolchain

    cache = Path(os.environ.get("TILEPROBE_TEST_CACHE") or tmp_path_factory.mktemp("tpcache"))
    return Toolchain(find_cutlass(), find_nvcc(), cache)


@pytest.fixture
def rng():
    seed = random.randrange(2**32)
    print(f"random seed {seed}")
    return random.Random(seed)


@pytest.fixture
def nvcc_path():
    path = shutil.which("nvcc")
    assert path, "nvcc must be on PATH for these tests"
    return path
