"""The documentation site (mkdocs.yml): it builds in strict mode (a broken link, a missing anchor
or a page left out of the nav fails), offline (nothing loaded from another host), and a page of
it renders in headless Chromium with the network off. Every code block of the documents either
runs in a test or is marked illustrative."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# What precedes every fenced block of a document: how a reader knows whether it was run.
MARK = re.compile(r"^<!-- (illustrative|runs: (\S+)) -->$")
GENERATED = re.compile(r"<!-- (numbers|reference): [\w-]+ -->\n.*?<!-- /(numbers|reference) -->", re.S)  # fmt: skip
FENCE = re.compile(r"^```")


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "scripts" / "mkdocs_hooks.py")  # fmt: skip
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("experiments/*/README.md"))]  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    warnings = [line for line in r.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert r.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(warnings or [r.stderr[-3000:]])  # fmt: skip
    return out


def test_the_site_builds_in_strict_mode_with_every_page(site):
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    for doc in sorted((ROOT / "docs").glob("*.md")):
        if doc.name != "README.md":
            assert doc.with_suffix(".html").name in pages, doc.name
    assert {"index.html", "experiments/hard/index.html", "cli.html"} <= pages


def test_the_site_loads_nothing_from_another_host(site):
    remote = re.compile(r"""<(?:script|link|img|iframe)\b[^>]*(?:src|href)=["'](?:https?:)?//""", re.I)  # fmt: skip
    for page in site.rglob("*.html"):
        found = remote.findall(page.read_text(encoding="utf-8"))
        assert not found, f"{page.relative_to(site)} loads from another host: {found[:3]}"
    for css in site.rglob("*.css"):
        assert "fonts.googleapis" not in css.read_text(encoding="utf-8", errors="replace")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_a_page_renders_offline_in_chromium(site, tmp_path):
    page = site / "results.html"
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp_path / 'chromium'}",
            "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--virtual-time-budget=10000", "--dump-dom", page.as_uri()]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    assert "<h1" in dom and "The default chain" in dom
    assert 'class="md-nav' in dom  # Material's navigation, drawn by its bundled assets
    assert "<table" in dom and "M(v3, v1)" in dom  # a generated block, rendered


def test_links_are_rewritten_for_the_site():
    hooks = _hooks()
    pages = hooks.external_pages()
    assert pages["README.md"] == "index.md" and "experiments/hard/README.md" in pages
    readme = "see [concepts](docs/concepts.md#the-criterion) and [code](compat/io.py) ![m](plots/cmc.png)"  # fmt: skip
    assert hooks.rewrite_links(readme, "README.md", "index.md", pages) == (
        "see [concepts](concepts.md#the-criterion) and code ![m](plots/cmc.png)"
    )
    doc = (
        "[hard](../experiments/hard/README.md) [gone](nothing.md)\n```\n[x](../compat/io.py)\n```\n"
    )
    out = hooks.rewrite_links(doc, "docs/results.md", "results.md", pages)
    assert out.startswith("[hard](experiments/hard/README.md) [gone](nothing.md)")
    assert "[x](../compat/io.py)" in out  # fenced code is left alone


def _blocks(text: str) -> list[tuple[int, str]]:
    """(line number, the line before) of every fenced block outside the generated regions."""
    text = GENERATED.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    lines, out, inside = text.splitlines(), [], False
    for i, line in enumerate(lines):
        if FENCE.match(line.lstrip()):
            if not inside:
                before = next((b for b in reversed(lines[:i]) if b.strip()), "")
                out.append((i + 1, before.strip()))
            inside = not inside
    return out


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_code_block_runs_in_a_test_or_is_marked_illustrative(doc):
    rel = doc.relative_to(ROOT).as_posix()
    problems = []
    for line, before in _blocks(doc.read_text(encoding="utf-8")):
        m = MARK.match(before)
        if not m:
            problems.append(f"{rel}:{line}: no <!-- illustrative --> or <!-- runs: TEST --> above the block")  # fmt: skip
        elif m.group(2):
            test = ROOT / m.group(2)
            if not test.is_file() or rel not in test.read_text(encoding="utf-8"):
                problems.append(f"{rel}:{line}: {m.group(2)} does not read {rel}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", ["docs/contracts.md", "docs/trained-elsewhere.md"])
def test_the_contract_examples_validate(doc):
    """The contracts shown in docs/contracts.md and docs/trained-elsewhere.md are valid contracts."""
    import yaml

    from compat.contracts.schema import Contract

    text = (ROOT / doc).read_text(encoding="utf-8")
    blocks = re.findall(r"<!-- runs: tests/test_docs_site.py -->\n```yaml\n(.*?)```", text, re.S)
    assert blocks, doc
    for block in blocks:
        Contract.model_validate(yaml.safe_load(block))


def test_getting_started_installs_as_the_readme_does():
    """docs/getting-started.md's install command is the README's first command, word for word
    (tests/test_setup_commands.py holds the README's commands to .ci/run and the locks)."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    block = page.split("## Install", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("```bash\n", 1)[1].split("```", 1)[0]  # fmt: skip
    first = next(line for line in readme.splitlines() if line and not line.startswith("#"))
    assert [line for line in block.splitlines() if line] == [first]


def test_mkdocs_yml_is_plain_yaml():
    """The pre-commit hook (and CI's hooks job) parses every YAML file with yaml.safe_load:
    mkdocs.yml must not need MkDocs's own loader (no !!python tags)."""
    import yaml

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["docs_dir"] == "docs"
