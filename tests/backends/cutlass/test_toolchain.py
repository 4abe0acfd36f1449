import os
import subprocess
import sys
from pathlib import Path

import pytest

from tileprobe.errors import ToolchainError
from tileprobe.backends.cutlass.toolchain import Nvcc, find_cutlass, find_nvcc


def fake_cutlass(root: Path, major: int, minor: int, patch: int) -> Path:
    inc = root / "include" / "cutlass"
    inc.mkdir(parents=True)
    (inc / "version.h").write_text(f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n"
                                   f"#define CUTLASS_PATCH {patch}\n")
    (inc / "gemm.h").write_text(f"// {major}.{minor}.{patch}\n")
    util = root / "tools" / "util" / "include" / "cutlass" / "util"
    util.mkdir(parents=True)
    return root


def test_explicit_dir_then_env_then_bundled(tmp_path, monkeypatch, rng):
    v = (rng.randint(1, 9), rng.randint(0, 20), rng.randint(0, 9))
    root = fake_cutlass(tmp_path / "c", *v)
    t = find_cutlass(root)
    assert t.version == ".".join(map(str, v)) and t.source == "flag"
    assert t.include_dirs == (root / "include", root / "tools" / "util" / "include")
    assert find_cutlass(root / "include").version == t.version  # an include dir is accepted as well
    monkeypatch.setenv("TILEPROBE_CUTLASS_DIR", str(root))
    assert find_cutlass().source == "env"
    monkeypatch.delenv("TILEPROBE_CUTLASS_DIR")
    bundled = find_cutlass()
    assert bundled.source == "flashinfer" and (bundled.root / "cutlass" / "version.h").is_file()


def test_tree_hash_follows_content(tmp_path):
    a = find_cutlass(fake_cutlass(tmp_path / "a", 4, 5, 0))
    b = find_cutlass(fake_cutlass(tmp_path / "b", 4, 5, 0))
    assert a.tree_hash == b.tree_hash  # same content, other place
    c = find_cutlass(fake_cutlass(tmp_path / "c", 4, 5, 1))
    assert c.tree_hash != a.tree_hash


def test_flashinfer_is_found_without_being_imported():
    code = ("import sys; from tileprobe.backends.cutlass.toolchain import find_cutlass; t = find_cutlass(); "
            "print(t.source, 'flashinfer' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "TILEPROBE_CUTLASS_DIR"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120).stdout
    assert out.split() == ["flashinfer", "False"]


def test_missing_cutlass_and_nvcc(tmp_path):
    with pytest.raises(ToolchainError, match="no CUTLASS headers"):
        find_cutlass(tmp_path)
    with pytest.raises(ToolchainError, match="nvcc not found"):
        find_nvcc(tmp_path / "nvcc")


def test_real_nvcc_version_and_arch_floor(nvcc_path):
    n = find_nvcc(nvcc_path)
    assert n.version >= (12, 8) and n.version_text.startswith(f"{n.version[0]}.{n.version[1]}")
    n.check_arch("sm_120a")
    old = Nvcc(n.path, (12, 8), "12.8.61")
    old.check_arch("sm_120a")
    with pytest.raises(ToolchainError, match="sm_121a.*12.9"):
        old.check_arch("sm_121a")
