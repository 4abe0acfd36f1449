"""`tileprobe inspect BINARY`: every kernel's resources per arch, read from the binary, and per target (or the GPU
present) whether the binary has code that runs there and the largest dynamic shared memory a launch may request.

Evidence: the static bytes are `compiled` (ptxas's own numbers, read from the cubin); the limit is the device's
opt-in (queried through cuda-python) or an offline profile's (tileprobe.targets). Nothing is launched.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from tileprobe import progress
from tileprobe.binary import expr
from tileprobe.binary.cubin import Kernel, demangle, kernels
from tileprobe.binary.elf import Image, images_in
from tileprobe.binary.jit import Jit
from tileprobe.errors import UsageError
from tileprobe.targets import PROFILES, NoDevice, Target, profile, query_devices


def runs_on(kind: str, sm: int, suffix: str, cc: int) -> bool:
    """Whether code for `sm` (with suffix '', 'a' or 'f') runs on a device of compute capability `cc` (major*10 +
    minor). A cubin runs on its own major version at the same or a higher minor; sm_XYa only on X.Y exactly
    (sm_120a does not run on 12.1); sm_XYf on its family (same major, same or higher minor). PTX is compiled at
    load for any device at or above its version; compute_XYa PTX only for X.Y."""
    if suffix == "a":
        return cc == sm
    same_major = cc // 10 == sm // 10 and cc % 10 >= sm % 10
    if kind == "cubin" or suffix == "f":
        return same_major
    return cc >= sm


@dataclass
class Request:
    """A --dynamic expression, with --set values and the --solve variable."""
    text: str
    env: dict[str, int]
    solve: str | None
    node: expr.Node = field(init=False)

    def __post_init__(self) -> None:
        self.node = expr.parse(self.text)
        if self.solve is None:  # every name has a value: refuse now, not per target
            expr.evaluate(self.node, self.env, self.text)
        else:
            expr.check_solvable(self.node, self.env, self.solve, self.text)


@dataclass
class Answer:
    """One kernel on one target."""
    kernel: str
    runs: bool
    code: str  # "sm_120a cubin (fatbin container 1 entry 2)" or why nothing runs
    static_smem: int | None = None
    max_dynamic: int | None = None
    registers: int | None = None
    max_threads: int | None = None
    request: str | None = None  # the --dynamic value, in bytes
    fits: bool | None = None
    solved: dict | None = None

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def targets_for(names: list[str] | None) -> list[Target]:
    """The named offline profiles; with none named, every profile and every GPU present."""
    if names:
        return [profile(n) for n in names]
    try:
        devices = query_devices()
    except NoDevice:
        devices = []
    return list(PROFILES.values()) + devices


def _pick(cands: list[tuple[Image, Kernel]], cc: int) -> tuple[Image, Kernel] | None:
    """The cubin the driver loads: the highest SM that runs here, an arch- or family-specific one before plain."""
    ok = [(im, k) for im, k in cands if runs_on("cubin", im.sm, im.suffix, cc)]
    if not ok:
        return None
    return max(ok, key=lambda c: (c[0].sm, {"a": 2, "f": 1}.get(c[0].suffix, 0)))


def _solve(req: Request, budget: int) -> tuple[str, bool, dict | None]:
    if req.solve is None:
        value = expr.evaluate(req.node, req.env, req.text)
        return expr.show(value), value <= budget, None
    s = expr.solve(req.node, req.env, req.solve, budget, req.text)
    out = {"var": s.var, "value": s.value, "unbounded": s.unbounded,
           "request": None if s.request is None else expr.show(s.request),
           "next_request": None if s.next_request is None else expr.show(s.next_request)}
    return out["request"] or "", s.value is not None or s.unbounded, out


_ENTRY = re.compile(rb"\.entry\s+([A-Za-z_$][\w$]*)")


def ptx_entries(images: list[Image]) -> set[str]:
    """Kernel names declared in the readable PTX entries (`.entry NAME`)."""
    return {m.group(1).decode() for im in images if im.kind == "ptx" and im.data for m in _ENTRY.finditer(im.data)}


def _resources(a: Answer, k: Kernel, target: Target, req: Request | None) -> Answer:
    budget = target.smem_optin - k.static_smem
    a.static_smem, a.max_dynamic, a.registers, a.max_threads = k.static_smem, max(0, budget), k.registers, \
        k.max_threads
    if req is not None:
        a.request, a.fits, a.solved = _solve(req, budget)
    return a


NO_PTXAS = "no ptxas here to compile it"  # why a PTX-only kernel's bytes are unknown with the JIT asked, no ptxas
NO_JIT = "not compiled (--no-jit)"  # ... and with it switched off


def _ptx_for(name: str, ptx: list[Image], entries: dict[str, set[str]]) -> Image | None:
    """The PTX image the driver would compile for kernel `name`: the newest of `ptx` that declares it (`.entry`)."""
    return next((im for im in ptx if im.data and name in entries.get(im.origin, ())), None)


def _from_ptx(name: str, ptx: list[Image], target: Target, req: Request | None, jit: Jit | None,
              have: str, entries: dict[str, set[str]], jit_why: str = NO_PTXAS) -> Answer:
    """A kernel with no cubin for the target: what its PTX gives (compiled here when a ptxas is at hand: only the
    image that declares it). `jit_why`: why nothing is compiled when `jit` is None."""
    demangled = demangle(name)
    if not ptx:
        return Answer(demangled, False, f"no code for compute capability {target.cc}: " + (
            f"cubins {have} do not run there and " if have else "") + "no PTX can be compiled for it")
    image = _ptx_for(name, ptx, entries)
    if image is None and all(im.data for im in ptx):  # every PTX that runs there is read: none declares it
        return Answer(demangled, False, f"no code for compute capability {target.cc}: " + (
            f"cubins {have} do not run there and " if have else "") + "no PTX of it is in the binary (the PTX "
            f"that runs there, {', '.join(sorted({im.arch for im in ptx}))}, declares other kernels)")
    head = (f"PTX {(image or ptx[0]).arch} only: compiled for {target.arch[:-1]} at load; its static bytes are not "
            "in the binary" + (f" (cubins: {have})" if have else ""))
    if image is None:  # some PTX could not be read: it may be there
        return Answer(demangled, True, f"{head}; not compiled: its PTX is not among the images tileprobe can read")
    if jit is None:
        return Answer(demangled, True, f"{head}; {jit_why}")
    found, what = jit.kernels_for(image, target.cc_int)
    k = next((k for k in found if k.name == name), None)
    if k is not None:
        return _resources(Answer(demangled, True, what), k, target, req)
    return Answer(demangled, True, f"{head}; {what}")


def _runnable_ptx(images: list[Image], cc: int) -> list[Image]:
    """The PTX images that run at compute capability `cc`, newest first (the driver compiles the newest)."""
    return sorted((im for im in images if im.kind == "ptx" and runs_on("ptx", im.sm, im.suffix, cc)),
                  key=lambda im: -im.sm)


def _by_name(images: list[Image], found: list[Kernel]) -> dict[str, list[tuple[Image, Kernel]]]:
    by_origin = {im.origin: im for im in images}
    out: dict[str, list[tuple[Image, Kernel]]] = {}
    for k in found:
        out.setdefault(k.name, []).append((by_origin[k.origin], k))
    return out


def entries_by_image(images: list[Image]) -> dict[str, set[str]]:
    """Per PTX image (by origin), the kernel names it declares."""
    return {im.origin: ptx_entries([im]) for im in images if im.kind == "ptx"}


def answer(images: list[Image], found: list[Kernel], target: Target, req: Request | None,
           ptx_only: list[str] | None = None, jit: Jit | None = None, entries: dict[str, set[str]] | None = None,
           jit_why: str = NO_PTXAS) -> list[Answer]:
    """Per kernel: its answer on `target`. `ptx_only`: kernels that have PTX but no cubin in the binary; `jit`
    compiles PTX for a target no cubin runs on (`jit_why`: why not, when None); `entries`: entries_by_image."""
    entries = entries_by_image(images) if entries is None else entries
    ptx = _runnable_ptx(images, target.cc_int)
    out = [_from_ptx(name, ptx, target, req, jit, "", entries, jit_why) for name in ptx_only or []]
    for name, cands in _by_name(images, found).items():
        chosen = _pick(cands, target.cc_int)
        if chosen is None:
            out.append(_from_ptx(name, ptx, target, req, jit, ", ".join(sorted({im.arch for im, _ in cands})),
                                 entries, jit_why))
            continue
        im, k = chosen
        out.append(_resources(Answer(k.demangled, True, f"{im.arch} cubin ({im.origin})"), k, target, req))
    return out


def jit_plan(images: list[Image], found: list[Kernel], targets: list[Target], ptx_only: list[str],
             entries: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The PTX compiles `answer` will ask of the JIT over these targets: (image origin, arch), each once."""
    plan: dict[tuple[str, str], None] = {}
    names = _by_name(images, found)
    for t in targets:
        ptx = _runnable_ptx(images, t.cc_int)
        for name in [*ptx_only, *(n for n, c in names.items() if _pick(c, t.cc_int) is None)]:
            im = _ptx_for(name, ptx, entries)
            if im is not None:
                plan[(im.origin, f"sm_{t.cc_int}{im.suffix}")] = None
    return list(plan)


def _select(found: list[Kernel], pattern: str | None) -> list[Kernel]:
    if not pattern:
        return found
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise UsageError(f"--kernel {pattern!r}: not a regular expression ({exc})") from None
    chosen = [k for k in found if rx.search(k.demangled) or rx.search(k.name)]
    if not chosen:
        raise UsageError(f"--kernel {pattern!r} matches none of the {len({k.name for k in found})} kernel(s): "
                         + ", ".join(sorted({k.demangled for k in found}))[:300])
    return chosen


def inspect(path: Path, kernel: str | None = None, target_names: list[str] | None = None,
            req: Request | None = None, jit: Jit | None = None, jit_why: str = NO_PTXAS) -> dict:
    """The whole report as data (what `--json` prints). `jit_why`: what a PTX-only row says when `jit` is None
    (NO_PTXAS, or NO_JIT for --no-jit). The PTX compiles show progress on stderr (tileprobe.progress): one unit
    each, each bounded by the Jit's timeout."""
    images = images_in(path)
    per_image = {im.origin: kernels(im) for im in images}
    found = [k for im in images for k in per_image[im.origin]]
    if not found and not ptx_entries(images):
        raise UsageError(f"{path}: its device code holds no kernels" + (
            " that can be read (" + "; ".join(sorted({im.note for im in images if im.note})) + ")"
            if any(im.note for im in images) else ""))
    ptx_only = sorted(ptx_entries(images) - {k.name for k in found})
    if kernel:
        try:
            rx = re.compile(kernel)
        except re.error as exc:
            raise UsageError(f"--kernel {kernel!r}: not a regular expression ({exc})") from None
        ptx_only = [n for n in ptx_only if rx.search(n) or rx.search(demangle(n))]
    found = _select(found, kernel) if found and not (kernel and ptx_only) else found
    targets = targets_for(target_names)
    entries = entries_by_image(images)
    plan = jit_plan(images, found, targets, ptx_only, entries) if jit is not None else []
    with progress.track(len(plan), f"inspect: ptxas on {len(plan)} PTX image(s) no cubin covers") as bar:
        if jit is not None:
            jit.progress = bar
        answers = {t.name: answer(images, found, t, req, ptx_only, jit, entries, jit_why) for t in targets}
    return {
        "file": str(path),
        "images": [{"arch": im.arch, "kind": im.kind, "origin": im.origin, "note": im.note,
                    "kernels": len(per_image[im.origin])} for im in images],
        "kernels": [k.as_dict() for k in found],
        "dynamic": None if req is None else {"expr": req.text, "set": req.env, "solve": req.solve},
        "targets": [{"target": t.name, "device_name": t.device_name, "cc": t.cc, "smem_optin": t.smem_optin,
                     "limit_source": "device query" if t.is_device else f"offline profile ({t.source})",
                     "evidence": "compiled",  # ptxas's bytes, read from the binary; nothing launched
                     "kernels": [a.as_dict() for a in answers[t.name]]} for t in targets],
    }


def render(report: dict) -> str:
    """Plain text: the per-arch table, then per target one line per kernel."""
    def image(i: dict) -> str:
        what = i["note"] or (f"{i['kernels']} kernel{'' if i['kernels'] == 1 else 's'}" if i["kind"] == "cubin"
                             else "")
        return f"{i['arch']} {i['kind']}" + (f" ({what})" if what else "")

    lines = [f"{report['file']}: " + ", ".join(image(i) for i in report["images"])]
    lines.append("")
    head = ("arch", "static smem B", "regs", "stack B", "max threads", "kernel")
    rows = [(k["arch"], str(k["static_smem"]), str(k["registers"]), str(k["stack_frame"]),
             str(k["max_threads"]) + (" (bound)" if k["launch_bounds"] or k["reqntid"] else ""), k["demangled"])
            for k in report["kernels"]]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head) - 1)]
    if not rows:
        lines.append("no cubin holds these kernels: PTX only (compiled by the driver at load)")
    for r in [head, *rows] if rows else []:
        lines.append("  ".join(c.rjust(w) if 0 < i < 5 and r is not head else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r[:-1], widths))) + "  " + r[-1])
    dyn = report["dynamic"]
    if dyn:
        sets = ", ".join(f"{k}={v}" for k, v in dyn["set"].items())
        lines += ["", f"dynamic request: {dyn['expr']} bytes" + (f" with {sets}" if sets else "")
                  + (f"; solving for the largest {dyn['solve']}" if dyn["solve"] else "")]
    for t in report["targets"]:
        lines += ["", f"{t['target']} ({t['device_name']}, cc {t['cc']}): opt-in {t['smem_optin']} B per block "
                      f"[{t['limit_source']}]; evidence {t['evidence']}: the binary's bytes, nothing launched"]
        for a in t["kernels"]:
            if not a["runs"] or a["static_smem"] is None:
                lines.append(f"  {'runs' if a['runs'] else 'DOES NOT RUN'}: {a['kernel']}: {a['code']}")
                continue
            line = (f"  runs: {a['kernel']}: {a['code']}; static {a['static_smem']} B; largest dynamic request "
                    f"{a['max_dynamic']} B (= {t['smem_optin']} - {a['static_smem']})")
            lines.append(line)
            if dyn:
                lines.append("    " + _dynamic_line(a, dyn, t["smem_optin"]))
    return "\n".join(lines) + "\n"


def _dynamic_line(a: dict, dyn: dict, optin: int) -> str:
    s = a["solved"]
    if s is None:
        need = int(a["request"]) + a["static_smem"]
        verdict = "fits" if a["fits"] else f"DOES NOT FIT, over by {expr.show(need - optin)} B"
        return f"request {a['request']} B + static {a['static_smem']} B = {expr.show(need)} B: {verdict}"
    if s["unbounded"]:
        return f"any {s['var']} fits: the request does not grow with it"
    if s["value"] is None:
        return (f"no {s['var']} >= 0 fits: {s['var']}=0 already requests {s['request']} B > {a['max_dynamic']} B")
    return (f"largest {s['var']} = {s['value']}: requests {s['request']} B <= {a['max_dynamic']} B; "
            f"{s['var']}={s['value'] + 1} would request {s['next_request']} B")
