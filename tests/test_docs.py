"""The README and docs/*.md stay true to the tree: every relative link (and image) points to a file
that exists, and every #anchor to a heading of the file it names. The README stays a user guide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_LINES = 250  # issue 17: "a README a user can read in five minutes"


def _outside_code(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks, with inline code removed."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "", line))
    return lines


def github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    headings = []
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            headings.append(line.lstrip("#"))
    return {github_anchor(h) for h in headings}


def relative_links(path: Path) -> list[str]:
    return [target for line in _outside_code(path.read_text(encoding="utf-8")) for target in LINK.findall(line)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto: are not checked here


def test_github_anchor_matches_githubs_rule() -> None:
    assert github_anchor("Accuracy at mini: FastRL loses it, and why") == "accuracy-at-mini-fastrl-loses-it-and-why"
    assert github_anchor("FastRL vs GRPO, mini scale: `make demo`") == "fastrl-vs-grpo-mini-scale-make-demo"
    assert github_anchor("Where the code departs from DESIGN.md") == "where-the-code-departs-from-designmd"


def test_links_are_found_outside_code_only(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text("see [a](a.md) and ![f](img/f.png), [web](https://x.org)\n"
                   "`[not](code.md)`\n```\n[nor](fenced.md)\n```\n")
    assert relative_links(doc) == ["a.md", "img/f.png"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in relative_links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_is_a_user_guide_of_at_most_250_lines() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines; measurements and narratives belong in docs/results.md"
