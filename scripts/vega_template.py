#!/usr/bin/env python3
"""Build vendor/vega/offline.html: DVC's plots page with vega, vega-lite and vega-embed inlined,
so ``dvc plots show`` draws its vega plots with no network (DVC's own page loads them from a
CDN and, offline, leaves every vega plot blank without a word).

    npm pack vega@5.20.2 vega-lite@5.2.0 vega-embed@6.18.2   # in an empty folder
    python scripts/vega_template.py FOLDER                    # writes vendor/vega/

The versions are the ones dvc-render's page asks for. The libraries' licences are copied beside
the page (vendor/vega/LICENSE.*); ``.dvc/config`` names the page as ``plots.html_template``.
tests/test_plots_offline.py checks it draws every plot in headless Chromium.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "vendor" / "vega"
PACKAGES = {"vega": "5.20.2", "vega-lite": "5.2.0", "vega-embed": "6.18.2"}

PAGE = """<!DOCTYPE html>
<html>
<head>
    {{refresh_tag}}
    <meta charset="utf-8">
    <title>DVC Plot (compat, offline)</title>
    <!-- vega {vega}, vega-lite {vega_lite}, vega-embed {vega_embed}, inlined from the npm
         registry's packages by scripts/vega_template.py; licences in vendor/vega/LICENSE.* -->
{libraries}
    <style>
        table {{
            border-spacing: 15px;
        }}
    </style>
</head>
<body>
    {{plot_divs}}
</body>
</html>
"""


def _member(tar: tarfile.TarFile, name: str) -> str:
    f = tar.extractfile(f"package/{name}")
    if f is None:
        raise SystemExit(f"error: package/{name} missing from {tar.name}")
    return f.read().decode("utf-8")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[0])
    OUT.mkdir(parents=True, exist_ok=True)
    scripts = []
    for name, version in PACKAGES.items():
        tgz = folder / f"{name}-{version}.tgz"
        if not tgz.is_file():
            raise SystemExit(f"error: {tgz}: not found (npm pack {name}@{version})")
        with tarfile.open(tgz) as tar:
            js = _member(tar, f"build/{name}.min.js")
            (OUT / f"LICENSE.{name}").write_text(_member(tar, "LICENSE"), encoding="utf-8")
        if "{plot_divs}" in js or "{scripts}" in js or "{refresh_tag}" in js:
            raise SystemExit(f"error: {name}: its code holds a DVC placeholder")
        scripts.append(f"    <script>/* {name} {version} */\n{js}\n    </script>")
    page = PAGE.format(
        vega=PACKAGES["vega"], vega_lite=PACKAGES["vega-lite"], vega_embed=PACKAGES["vega-embed"],
        libraries="\n".join(scripts),
    )  # fmt: skip
    (OUT / "offline.html").write_text(page, encoding="utf-8")
    print(f"wrote {OUT / 'offline.html'} ({len(page):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
