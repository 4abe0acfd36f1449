"""The README is a front door: it links each docs/ page exactly once, every relative link in it and in docs/ points at
a file (and heading) that exists, and the test command it gives is the one CI runs (`.ci/run`)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor for a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # a '#' line inside a code block is no heading
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:", t)]


def test_readme_links_each_docs_page_once():
    pages = sorted(p.relative_to(ROOT).as_posix() for p in DOCS.glob("*.md"))
    assert pages, "no docs/ pages: the README's reference text has nowhere to live"
    links = [t.split("#")[0] for t in relative_links(README)]
    assert {p: links.count(p) for p in pages} == {p: 1 for p in pages}


def test_every_relative_link_resolves_to_a_file_and_heading():
    bad = []
    for page in [README, *sorted(DOCS.glob("*.md"))]:
        for target in relative_links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                bad.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                bad.append(f"{page.name}: {target} (no such heading)")
    assert not bad, bad


def test_readme_gives_ci_test_command():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pytest" in line]
    assert ci, ".ci/run runs no pytest"
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert any(ci[-1].strip() in b.splitlines() for b in blocks), ci[-1]
