"""The repository stands alone: every document a tracked file cites is in the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", "")
# An upper-case document name (README.md and the like) or a path to a Markdown file.
CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[A-Z][A-Z_]+\.md|(?:[\w.-]+/)+[\w.-]+\.md)\b")
# Paths that are not documents of this repository: the Markdown files the pipeline or a tool
# writes elsewhere, and links into other projects.
NOT_OURS = re.compile(r"^(https?:|\$|/)")


def tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in out if Path(p).suffix in TEXT and (ROOT / p).is_file()]


def cited_documents(text: str) -> set[str]:
    return {m.group(1) for m in CITED.finditer(text) if not NOT_OURS.match(m.group(1))}


def resolves(doc: str, citing: Path) -> bool:
    """A citation names a file relative to the citing file's folder or to the repository root,
    or (a bare upper-case name such as README.md) any file of that name in the repository."""
    candidates = [citing.parent / doc, ROOT / doc]
    if "/" not in doc:
        candidates += list(ROOT.glob(f"**/{doc}"))
    return any(c.is_file() for c in candidates)


def test_citation_pattern():
    gone = "".join(["NOTES", ".md"])  # spelt apart, so this file does not cite it
    text = f"see {gone} and docs/reference.md#metrics, README.md, not foo.md.bak or x/{gone}x"
    assert cited_documents(text) == {gone, "docs/reference.md", "README.md"}
    assert not resolves(gone, ROOT / "tests" / "test_docs.py")


@pytest.mark.parametrize("path", tracked_text_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_document_exists(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        pytest.skip("not text")
    missing = sorted(d for d in cited_documents(text) if not resolves(d, path))
    assert not missing, f"{path.relative_to(ROOT)} cites documents not in the repository: {missing}"
