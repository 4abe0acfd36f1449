"""Cut an engine wheel down to what tileprobe's triton-moe reads: the fused_moe kernel file, the shipped config
tree and the wheel's METADATA (a few MB instead of vLLM's 336 MB), so it can travel where the whole wheel cannot
(the lent GPU machine takes 64 MiB of carried files). The result is read like the wheel (--engine-wheel, or a folder
in $TILEPROBE_ENGINE_WHEELS). It holds the engine's own files: keep it out of git (never commit it).

python3 tools/slim_engine_wheel.py WHEEL OUT_DIR
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

KEEP = {
    "vllm": ("vllm/model_executor/layers/fused_moe/fused_moe.py", "vllm/model_executor/layers/fused_moe/configs/"),
    "sglang": ("sglang/kernels/ops/moe/fused_moe_triton_kernels.py",
               "sglang/srt/layers/moe/moe_runner/triton_utils/configs/"),
}


def main() -> None:
    if len(sys.argv) != 3:
        raise SystemExit(__doc__.strip().splitlines()[-1])
    wheel, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    engine = wheel.name.split("-")[0]
    if engine not in KEEP:
        raise SystemExit(f"{wheel.name}: not a vllm or sglang wheel")
    out_dir.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = [n for n in names if re.fullmatch(rf"{engine}-[^/]+\.dist-info/METADATA", n)]
        keep = [n for n in names if any(n == k or (k.endswith("/") and n.startswith(k)) for k in KEEP[engine])]
        version = re.search(r"^Version:\s*(\S+)", z.read(meta[0]).decode(), re.M).group(1)
        out = out_dir / f"{engine}-{version}-0slim-py3-none-any.whl"
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as o:
            for n in meta + keep:
                o.writestr(n, z.read(n))
    print(f"{out}: {len(keep)} files, {out.stat().st_size} B")


if __name__ == "__main__":
    main()
