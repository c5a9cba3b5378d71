"""README.md and docs/ hold together for a reader: every link between them lands on a file and a
heading that exist, and no example names a folder of somebody's machine."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Folders of the machine a page was written on, not of the reader's.
MACHINE_PATHS = re.compile(r"(?<![\w.$])/(?:work|root|home|tmp|Users)/")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings (lower case, punctuation dropped, spaces to '-')."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # https://, mailto:: outside this repository
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    return broken


def test_every_link_between_the_readme_and_docs_lands_on_a_heading():
    broken = {page.name: broken_links(page) for page in PAGES}
    assert {name: links for name, links in broken.items() if links} == {}


def test_the_link_check_sees_a_link_that_lands_nowhere(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Scale out\n\n[ok](#scale-out) [gone](#settings) [none](nowhere.md)\n")
    assert broken_links(page) == ["#settings", "nowhere.md"]


def test_no_page_names_a_folder_of_a_developers_machine():
    named = {page.name: MACHINE_PATHS.findall(page.read_text(encoding="utf-8")) for page in PAGES}
    assert {name: paths for name, paths in named.items() if paths} == {}


def test_the_readme_stays_short_enough_to_read_first():
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 160
