"""MkDocs hooks (mkdocs.yml ``hooks:``): the repository's documents outside ``docs/`` as pages.

The site is built from ``docs/``, but some documents live beside what they describe: the
README (the site's home page), each experiment's README and the results its scripts write.
``on_files`` adds them to the site under their repository paths (the README as
``index.md``); ``on_page_markdown`` rewrites every relative link, which is written for a
reader of the repository (``../experiments/hard/README.md`` from ``docs/``, ``docs/concepts.md``
from the README), into the link between the two pages of the site. A link to a file the site
does not hold (source code, a test) keeps its text and loses the link. A link that leads
nowhere in the repository is left as written, so MkDocs's strict build reports it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCS = "docs/"
# Documents and pictures outside docs/ that the site shows, by repository path (globs).
EXTERNAL = (
    "experiments/*/README.md",
    "experiments/*/results/*.md",
    "experiments/*/results/*.png",
    "benchmarks/results/*.md",
    "plots/*.png",
)
# [text](target) and ![alt](target); a target has no spaces and no parentheses.
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^()\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)


def external_pages(root: Path = ROOT) -> dict[str, str]:
    """Repository path -> site path of every document outside docs/ that the site shows."""
    pages = {"README.md": "index.md"}
    for pattern in EXTERNAL:
        for path in sorted(root.glob(pattern)):
            rel = path.relative_to(root).as_posix()
            pages[rel] = rel
    return pages


def site_path(repo_path: str, pages: dict[str, str]) -> str | None:
    """Where a repository path lives in the site, or None if the site does not hold it."""
    if repo_path.startswith(DOCS):
        return repo_path[len(DOCS) :]
    if repo_path in pages:
        return pages[repo_path]
    readme = posixpath.join(repo_path, "README.md")
    return pages.get(readme)


def rewrite_links(markdown: str, source: str, page_uri: str, pages: dict[str, str], root: Path = ROOT) -> str:  # fmt: skip
    """``markdown`` of the repository file ``source`` with its relative links made links of
    the site page ``page_uri``; fenced code blocks are left alone."""
    base = posixpath.dirname(source)

    def one(m: re.Match[str]) -> str:
        bang, text, target = m.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)
        path, _, anchor = target.partition("#")
        repo = posixpath.normpath(posixpath.join(base, path))
        if repo.startswith("../") or not (root / repo).exists():
            return m.group(0)  # nowhere: the strict build names it
        site = site_path(repo, pages)
        if site is None:
            return m.group(0) if bang else text
        link = posixpath.relpath(site, posixpath.dirname(page_uri) or ".")
        return f"{bang}[{text}]({link}{'#' + anchor if anchor else ''})"

    out, last = [], 0
    for fence in FENCE.finditer(markdown):
        out.append(LINK.sub(one, markdown[last : fence.start()]))
        out.append(fence.group(0))
        last = fence.end()
    out.append(LINK.sub(one, markdown[last:]))
    return "".join(out)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for repo, site in external_pages().items():
        if files.get_file_from_path(site) is None:
            files.append(File.generated(config, site, abs_src_path=str(ROOT / repo)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    source = Path(page.file.abs_src_path).resolve().relative_to(ROOT).as_posix()
    return rewrite_links(markdown, source, page.file.src_uri, external_pages())
