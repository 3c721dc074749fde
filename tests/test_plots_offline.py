"""``dvc plots show`` draws its vega plots offline: the project's DVC config names an HTML
template with vega, vega-lite and vega-embed inlined (vendor/vega/, built by
scripts/vega_template.py), and headless Chromium, with the network off, finds every vega plot
drawn (a canvas inside each embed). DVC's own page loads the libraries from a CDN and, offline,
leaves every vega plot blank without a word."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "vendor" / "vega" / "offline.html"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_config_names_the_vendored_template_with_its_licences():
    cfg = configparser.ConfigParser()
    cfg.read(REPO / ".dvc" / "config")
    assert (REPO / ".dvc" / cfg["plots"]["html_template"]).resolve() == TEMPLATE
    page = TEMPLATE.read_text(encoding="utf-8")
    assert page.count("{plot_divs}") == 1 and "cdn." not in page.split("<script>")[0]
    for name, version in (("vega", "5.20.2"), ("vega-lite", "5.2.0"), ("vega-embed", "6.18.2")):
        assert f"/* {name} {version} */" in page
        assert "Copyright" in (TEMPLATE.parent / f"LICENSE.{name}").read_text(encoding="utf-8")


def _dom(html: Path, tmp: Path) -> str:
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={tmp / 'chromium'}",
            # no network at all: a page that needs a CDN cannot reach one
            "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--virtual-time-budget=20000", "--dump-dom", html.as_uri()]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
@pytest.mark.parametrize("template", ["project", "dvc's own"])
def test_every_vega_plot_draws_offline(tmp_path, template):
    for name in ("dvc.yaml", "params.yaml", ".dvcignore", "plots", "metrics", "vendor"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / name)
    (tmp_path / ".dvc").mkdir()
    config = (REPO / ".dvc" / "config").read_text()
    if template != "project":
        config = config.split("[plots]")[0]
    (tmp_path / ".dvc" / "config").write_text(config)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    dvc = str(Path(sys.executable).with_name("dvc"))
    r = subprocess.run([dvc, "plots", "show"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    html = tmp_path / "dvc_plots" / "index.html"
    embeds = re.findall(r"vegaEmbed\('#([\w.-]+)'", html.read_text(encoding="utf-8"))
    assert len(embeds) >= 12  # the CMC curves and the partial-backfill curves
    dom = _dom(html, tmp_path)
    drawn = dom.count("<canvas")
    if template == "project":
        assert drawn == len(embeds), f"{drawn} of {len(embeds)} vega plots drawn"
    else:  # the reason for the template: DVC's page draws nothing offline
        assert drawn == 0
