"""Kernel names from nvcc's host pass only (shared by the identity tests: tests/engines/test_engine_flashinfer.py,
tests/families/test_vllm_moe.py). `test_engine_flashinfer.py::test_host_pass_names_the_ptx_entry` checks that the
names read this way are the entries the full device pass emits."""

from __future__ import annotations

import os
import re
import shlex
import struct
import subprocess
from pathlib import Path

from tileprobe.binary import elf

NVCC_TIMEOUT_S = 900  # one host pass of a TU with several instantiations takes well under a minute; a hang must end


def host_pass(nvcc: str, flags: list[str], src: Path) -> elf.Elf:
    """Compile `src` with nvcc's host pass only and return the host object, parsed.

    nvcc is asked for its plan (`--dryrun --keep`) for exactly these flags, and its host steps are run as it would run
    them (argument lists, no shell): the host preprocessor, cudafe++ (the CUDA front end that splits the TU and gives
    every kernel a host stub) and the host compiler. The device pass (cicc, ~1 min and ~6 GiB per FlashInfer SM120
    instantiation, where the old per-TU PTX proof spent its time) is not run; its one product the host compile
    includes, the registration stub file, is written empty. Every kernel the TU odr-uses keeps a host stub whose symbol
    is the kernel's mangled name: the name the device pass gives the PTX entry, with internal linkage (`L`) because the
    registration that would export it is absent. `test_engine_flashinfer.py::test_host_pass_names_the_ptx_entry` checks that equality with
    the full device pass on the same nvcc."""
    keep = src.with_suffix(".kd")
    keep.mkdir(exist_ok=True)
    obj = keep / (src.stem + ".o")
    plan = subprocess.run([nvcc, *flags, "-c", str(src), "-o", str(obj), "--dryrun", "--keep", "--keep-dir", str(keep)],
                          capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr[-2000:]
    steps = [shlex.split(line[3:]) for line in plan.stderr.splitlines()
             if line.startswith("#$ ") and not re.match(r"[A-Za-z_]+=", line[3:])]
    cicc = next(c for c in steps if c[0].endswith("/cicc"))
    front = next(c for c in steps if Path(c[0]).name == "cudafe++")
    host = [steps[0], front, steps[-1]]  # host preprocess, cudafe++, host compile of the .cudafe1.cpp
    assert "-E" in host[0] and "-c" in host[2] and host[2][-1] == str(obj), [c[:2] for c in host]
    env = dict(os.environ, PATH=f"{Path(nvcc).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for i, step in enumerate(host):
        if i == 2:
            Path(cicc[cicc.index("--stub_file_name") + 1]).write_text("")
        proc = subprocess.run(step, capture_output=True, text=True, env=env, cwd=src.parent, timeout=NVCC_TIMEOUT_S)
        assert proc.returncode == 0, f"{Path(step[0]).name} failed on {src.name}:\n{proc.stderr[-4000:]}"
    return elf.parse_elf(obj.read_bytes(), str(obj))


def relocations(obj: elf.Elf) -> list[tuple[int, int, str]]:
    """(index of the section patched, offset in it, the function pointed at) for every RELA entry of a relocatable
    object; a target named as section symbol + addend is resolved to the function at that address (a PC-relative
    call's addend is -4). Stub names lose the internal-linkage `L` (see `_host_pass`)."""
    funcs = {(s.shndx, s.value): s.name for s in obj.symbols if s.type == 2}
    out = []
    for sec in obj.sections:
        if sec.type != 4:  # SHT_RELA
            continue
        data = sec.data(obj.blob)
        for k in range(len(data) // 24):
            offset, info, addend = struct.unpack_from("<QQq", data, 24 * k)
            sym, kind = obj.symbols[info >> 32], info & 0xFFFFFFFF
            name = funcs.get((sym.shndx, addend + (4 if kind in (2, 4) else 0)), "") if sym.type == 3 else sym.name
            out.append((sec.info, offset, re.sub(r"^_ZN7cutlassL13|^_ZL", lambda m: m[0].replace("L", ""), name)))
    return out


def entry_target(obj: elf.Elf, variable: str) -> set[str]:
    """What a `void* tp_entry_<i> = &kernel` variable's initialiser points at: the relocation at its own offset."""
    var = obj.symbol(variable)
    assert var is not None, f"{variable} is not in the object"
    return {name for shndx, offset, name in relocations(obj) if (shndx, offset) == (var.shndx, var.value)}
