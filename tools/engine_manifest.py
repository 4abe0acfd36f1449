"""Write or check an engine release's manifest (tileprobe/engines/manifest.py).

    python tools/engine_manifest.py write vllm ~/.cache/tileprobe/wheels/vllm-0.34.0-...whl
    python tools/engine_manifest.py check vllm WHEEL
    python tools/engine_manifest.py walk vllm WHEEL     (print each entry's files from Triton's walk)

`write` imports each audit entry's served modules from the wheel (tileprobe.audit.dependencies: nothing compiled or
launched), walks Triton's own dependency finder from every @triton.jit function they define, and writes, per entry,
the sha256 of the union of those files and the modules the launcher runs, saying which came from the walk; and
tileprobe's re-typed pieces outside the audit (the triton-moe launch and lookup), their files and whether the launch
binds to this release's kernel. Review
the diff of tileprobe/engines/manifests/<engine>-<version>.json before committing it: that file is what makes the
release one tileprobe answers for.
"""

from __future__ import annotations

import sys

from tileprobe.audit import dependencies
from tileprobe.audit.kernels import kernels_for
from tileprobe.engines import manifest, triton_lookup
from tileprobe.engines.triton_configs import find_engine
from tileprobe.errors import UsageError
from tileprobe.families import triton_moe
from tileprobe.triton.sweep import kernel_source


def pieces(src) -> dict:
    """tileprobe's re-typed pieces outside the audit, with their files and whether they hold for this release: the
    triton-moe launch (check-configs, export triton-configs, triton-moe sweeps) binds to the release's
    fused_moe_kernel (triton_moe.launch_binds), and its config lookup was read from these files."""
    files = triton_lookup.engine_module(src.engine).LOOKUP_FILES
    return {triton_moe.PIECE: (files, triton_moe.launch_binds(src.engine, kernel_source(src)))}


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("write", "check", "walk"):
        sys.stderr.write(__doc__)
        return 2
    verb, engine, wheel = argv
    try:
        src = find_engine(engine, wheel)
        if verb == "check":
            want = manifest.read(src.engine, src.version)
            if want is None:
                manifest.check(src)  # the one line saying so
            differ = manifest.differing(src, want)
            for rel, users in sorted(differ.items()):
                print(f"{rel}: {', '.join(users)}")
            print(f"{src.label()}: {len(differ)} file(s) differ from its manifest" if differ else
                  f"{src.label()}: every file matches its manifest")
            return 1 if differ else 0
        entries = kernels_for(engine)
        walked = dependencies.walk(src, entries)
        held = pieces(src)
    except UsageError as exc:
        sys.stderr.write(f"engine_manifest: {exc}\n")
        return 2
    for name, files in walked.items():
        if isinstance(files, str):
            sys.stderr.write(f"engine_manifest: {src.label()} {name}: not walked ({files})\n")
        elif verb == "walk":
            print(f"{name}: {', '.join(files)}")
    for name, (_, why) in held.items():
        if why:
            sys.stderr.write(f"engine_manifest: {src.label()} {name}: not checked ({why})\n")
    if verb == "write":
        print(manifest.write(src, entries, walked, held))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
