"""The README stays a front page (what, why, the quick start, links), and its links resolve.
`make docs` checks the docs site itself (mkdocs build --strict: links, anchors, images)."""

from __future__ import annotations

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as readme:
        return readme.read()


def test_the_readme_stays_under_15_kb():
    assert len(_readme().encode()) <= 15 * 1024


def test_every_relative_link_in_the_readme_points_at_a_file():
    targets = re.findall(r"\]\(([^)\s]+)\)", _readme())
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+://|#", t)]
    assert len(relative) > 10, relative
    missing = [t for t in relative if not os.path.exists(os.path.join(ROOT, t))]
    assert missing == []


def test_every_docs_page_is_in_the_site_navigation():
    with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as config:
        nav = set(re.findall(r":\s*([\w/.-]+\.md)\s*$", config.read(), re.M))
    pages = {os.path.relpath(os.path.join(d, f), os.path.join(ROOT, "docs"))
             for d, _, files in os.walk(os.path.join(ROOT, "docs")) for f in files if f.endswith(".md")}
    assert pages == nav
