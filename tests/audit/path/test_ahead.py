"""The path's reads done ahead in a worker process (tileprobe.audit.path.ahead): the worker fills the binary index the
main process then reads; while the worker holds an entry's lock the main process waits for its index instead of
reading the binary a second time; `close` stops a worker in the middle of a read and leaves no half-written file and
no held lock."""

from __future__ import annotations

import functools
import time

import pytest
from filelock import FileLock, Timeout

from _session_draw import session_rng
from tileprobe.audit.path import ahead, binaries, families
from tileprobe.audit.path.call import Context, KernelCall
from tileprobe.audit.path.families import custom_ops
from tileprobe.engines import wheel_zip
from tileprobe.targets import PROFILES


def _call(op: str) -> KernelCall:
    return KernelCall("layer", "prefill", custom_ops.NAME, op, {"kernel": op, "dtype": "bf16"}, "test", "vllm")


def _index_held(index) -> bool:
    try:
        FileLock(str(index) + ".lock").acquire(timeout=0)
    except Timeout:
        return True
    FileLock(str(index) + ".lock").release(force=True)
    return False


def _wait_until_the_worker_reads(index) -> None:
    """Until the worker holds the index's lock (it is reading the binary); a worker that finished first fails."""
    deadline = time.monotonic() + 120
    while not _index_held(index):
        assert not index.is_file(), "the worker finished before the main process asked"
        assert time.monotonic() < deadline, "the worker never started the index"
        time.sleep(0.005)


@pytest.fixture
def ctx(vllm_wheel, tmp_path, monkeypatch):
    monkeypatch.setenv(ahead.ENV, "1")
    target = session_rng("ahead target").choice(["rtx-pro-6000", "h200", "dgx-spark-gb10"])
    return Context(PROFILES[target], vllm_wheel, tmp_path)


def _member(ctx, op: str):
    rel = custom_ops.OPS[op].so
    assert rel in wheel_zip.names(str(ctx.engine_source.origin))
    return binaries.member(ctx.engine_source.origin, ctx.engine_source.kind, rel, ctx.cache_dir)


def test_the_main_process_waits_for_the_workers_index_and_answers_from_it(ctx, monkeypatch):
    op = "reshape_and_cache_flash"  # in vLLM's largest custom-op binary: seconds of reading
    path = _member(ctx, op)  # extracted here, so the worker's first step is the index
    index = path.with_name(path.name + f".index{binaries.INDEX_VERSION}.pickle")
    with ahead.Ahead(ctx) as pre:
        assert pre.running
        pre.add(functools.partial(list, [_call(op)]))
        _wait_until_the_worker_reads(index)

        def reread(p):
            raise AssertionError(f"the main process read {p} again while the worker was reading it")

        monkeypatch.setattr(binaries, "_read", reread)
        binaries.library.cache_clear()
        got = families.answer(_call(op), ctx)
    assert index.is_file()
    monkeypatch.undo()
    binaries.library.cache_clear()
    fresh = Context(ctx.target, ctx.engine_source, ctx.cache_dir / "fresh")
    assert got == families.answer(_call(op), fresh)  # the answer of a read of its own
    assert got[1].arch.ok is not None


def test_close_stops_a_worker_in_the_middle_of_a_read(ctx):
    op = "reshape_and_cache_flash"
    path = _member(ctx, op)
    index = path.with_name(path.name + f".index{binaries.INDEX_VERSION}.pickle")
    pre = ahead.Ahead(ctx)
    pre.add(functools.partial(list, [_call(op)]))
    _wait_until_the_worker_reads(index)
    t0 = time.monotonic()
    pre.close()
    assert time.monotonic() - t0 < 10 and not pre.running
    assert not _index_held(index) and not index.is_file()
    assert not [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_nothing_is_started_when_off(ctx, monkeypatch):
    monkeypatch.setenv(ahead.ENV, "0")
    with ahead.Ahead(ctx) as pre:
        pre.add(functools.partial(list, [_call("topk_softmax")]))
        assert not pre.running
    assert not ahead.Ahead(None).running
