"""MkDocs hook: the measured figures' files go with the site, so a figure's link opens the file it comes from.

A page links a figure to its file as the repository lays it out (``../bench/results/x.json#key``, see
``bench/figures.py``); the site copies every file of ``bench/results/`` to ``bench-results/`` and points those links
there.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files
    from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
SITE_FOLDER = "bench-results"
TARGET = re.compile(r"\]\(((?:\.\./)+bench/results/[^)#\s]+)")


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add every file of ``bench/results/`` to the site under ``bench-results/``."""
    from mkdocs.structure.files import File

    for path in sorted(RESULTS.rglob("*")):
        if path.is_file():
            uri = f"{SITE_FOLDER}/{path.relative_to(RESULTS).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


def site_link(link: str, page_uri: str) -> str:
    """``link`` (relative to the page's source in the repository) as a link to the site's copy of the file."""
    docs_dir = posixpath.dirname(page_uri)
    in_repo = posixpath.normpath(posixpath.join("docs", docs_dir, link))
    relative = posixpath.relpath(in_repo, "bench/results")
    return posixpath.relpath(posixpath.join(SITE_FOLDER, relative), docs_dir or ".")


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Point the page's links into ``bench/results/`` at the site's copies."""
    return TARGET.sub(lambda m: f"]({site_link(m.group(1), page.file.src_uri)}", markdown)
