"""An unhandled error inside tileprobe is one line on stderr and exit 4 (never 1, which means "does not fit"), with
the full traceback in a log file the line names (or on stderr with TILEPROBE_DEBUG=1)."""

from __future__ import annotations

import re

import pytest

from tileprobe import cli
from tileprobe.reports import report


def _boom(*args, **kwargs):
    raise RuntimeError("planted failure in devices_table")


@pytest.mark.parametrize("debug", [False, True])
def test_an_internal_error_is_one_line_and_exit_4(monkeypatch, capsys, debug, rng):
    monkeypatch.setattr(report, "devices_table", _boom)  # `devices` imports it when it runs
    monkeypatch.setattr("sys.argv", ["tileprobe", "devices"])
    if debug:
        monkeypatch.setenv("TILEPROBE_DEBUG", "1")
    else:
        monkeypatch.delenv("TILEPROBE_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == cli.INTERNAL_ERROR == 4
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("tileprobe: ")]
    assert len(lines) == 1 and "RuntimeError: planted failure" in lines[0], err
    if debug:
        assert "Traceback (most recent call last)" in err and "_boom" in err
    else:
        assert "Traceback" not in err and len(err.splitlines()) == 1
        path = re.search(r"traceback: (\S+);", lines[0]).group(1)
        assert "_boom" in open(path).read()
