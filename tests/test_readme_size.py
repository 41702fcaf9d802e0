"""The README a newcomer reads stays short and its links lead somewhere: under 15,000 bytes (long sections live
in docs/*.md, linked from it), and every relative link of README.md and of the docs pages names a file of the
repository (and, with `#anchor`, a heading of that file)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

README_BUDGET = 15_000  # bytes
# [text](target) and ![alt](target); a target ends at whitespace or ")" (titles are not used here).
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s[^)]*)?\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def pages() -> list[Path]:
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def relative_links(page: Path) -> list[str]:
    """The link targets of `page` outside code blocks that point into the repository (no scheme, no `//`)."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"^([a-z][a-z0-9+.-]*:|//)", t, re.I)]


def anchors(page: Path) -> set[str]:
    """GitHub's anchors of `page`'s headings: lower case, punctuation dropped, spaces as hyphens."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    heads = re.findall(r"^#{1,6} +(.+?) *#* *$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def test_the_readme_is_under_its_size_budget() -> None:
    size = (REPO_ROOT / "README.md").stat().st_size
    assert size < README_BUDGET, f"README.md is {size:,} bytes (budget {README_BUDGET:,}): move a section to docs/"


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_relative_link_points_to_an_existing_file(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_relative_to(REPO_ROOT) or not dest.exists():
            broken.append(f"{target} (no file {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    assert not broken, f"{page.relative_to(REPO_ROOT)}: broken links: {broken}"


def test_the_readme_links_the_pages_its_sections_moved_to() -> None:
    """Each section moved out of the README is reachable from it (nothing a reader had is out of reach)."""
    links = {t.partition("#")[0] for t in relative_links(REPO_ROOT / "README.md")}
    moved = ["annotator", "study_fields", "model_suggestions", "exports", "buckets_and_clusters", "benchmarks",
             "platform_notes", "scale_out"]  # fmt: skip
    assert {f"docs/{name}.md" for name in moved} <= links
    tour = ["episodes", "replay_ui_tagged", "replay_env", "record", "studies", "export", "label", "quality", "report"]
    assert {f"docs/screenshots/{name}.png" for name in tour} <= links
