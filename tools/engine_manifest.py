"""Write or check an engine release's manifest (tileprobe/engines/manifest.py).

    python tools/engine_manifest.py write vllm ~/.cache/tileprobe/wheels/vllm-0.34.0-...whl
    python tools/engine_manifest.py check vllm WHEEL
"""

from __future__ import annotations

import sys

from tileprobe.audit.kernels import kernels_for
from tileprobe.engines import manifest
from tileprobe.engines.triton_configs import find_engine


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[0] not in ("write", "check"):
        sys.stderr.write(__doc__)
        return 2
    verb, engine, wheel = argv
    src = find_engine(engine, wheel)
    if verb == "write":
        print(manifest.write(src, kernels_for(engine)))
        return 0
    print(manifest.check(src).text or f"{src.label()}: every file matches its manifest")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
