"""docs/own-images.md's "Your own images" recipe in one step (issue 29): the project's own params.yaml
with only its ``data:`` block replaced by that page's folder block, on a generated 20-class
folder, runs data and split (sizes given as shares or ``auto`` scale to the source), one short
train and the evaluate stage, as DVC runs them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[2]


def _readme_folder_block() -> str:
    text = (REPO / "docs" / "own-images.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own images") :]
    block = re.search(r"```yaml\n(data:\n  kind: folder.*?)```", section, re.S)
    assert block, "docs/own-images.md's folder recipe"
    return block.group(1)


def _run(stage: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / "stages" / f"{stage}.py"), *args, *(["--no-progress"] if stage == "train" else [])],
        cwd=cwd, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_the_readme_recipe_runs_on_a_small_folder(tmp_path):
    root = tmp_path / "images"
    rng = np.random.default_rng(0)
    for c in range(20):
        base = rng.integers(0, 255, size=(3,), dtype=np.uint8)
        for i in range(8):
            px = np.clip(base + rng.integers(-40, 40, size=(24, 24, 3)), 0, 255).astype(np.uint8)
            (root / f"class{c:02d}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(px).save(root / f"class{c:02d}" / f"{i}.png")
    block = _readme_folder_block().replace("/srv/images", str(root))
    params = (REPO / "params.yaml").read_text(encoding="utf-8")
    start, end = params.index("data:\n"), params.index("\nsplit:")
    (tmp_path / "params.yaml").write_text(params[:start] + block + params[end:])
    for stage in ("data", "split"):
        r = _run(stage, tmp_path)
        assert r.returncode == 0, r.stderr
    ev = json.loads((tmp_path / "splits" / "eval.json").read_text())
    assert len(set(ev["labels"])) == 10  # split.eval.classes: 0.5 of 20
    assert ev["pairs"] and sum(p[2] for p in ev["pairs"]) * 2 == len(ev["pairs"])  # balanced
    # one short train of the first version, then the evaluate stage on it
    r = _run("train", tmp_path, "v1")
    assert r.returncode == 0, r.stderr
    assert "using batches of" in r.stderr  # 128 is more than v1's images: whole-set batches
    cfg = yaml.safe_load((tmp_path / "params.yaml").read_text())
    cfg["evaluate"] = {"chain": ["v1"], "bootstrap": 50}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(cfg))
    r = _run("evaluate", tmp_path)
    assert r.returncode == 0, r.stderr
    head = json.loads((tmp_path / "metrics" / "headline.json").read_text())
    assert 0 <= head["v1"]["self"] <= 1
