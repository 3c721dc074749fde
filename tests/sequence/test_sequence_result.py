"""docs/reference.md expected result 8, measured: hoc keeps AC high across sequential fine-tuning and
model replacements, where the ER baseline (learnable classifier, CE only) drops to 0.

Slow: sequence.yaml with hoc and er only (no bootstrap) runs through the real stages (data, split,
pre-training, train, evaluate, summary) in a scratch folder; about two thirds of the
experiment's CPU time (tens of minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from seq_scripts import EXPERIMENT, REPO, script

pytestmark = pytest.mark.slow


def _reduced(spec: dict) -> dict:
    spec = json.loads(json.dumps(spec))
    spec["methods"] = {k: v for k, v in spec["methods"].items() if k in ("hoc", "er")}
    spec["evaluate"]["bootstrap"] = 0
    return spec


def _run(cmd: list[str], cwd: Path) -> str:
    env = {**os.environ}
    env.pop("MLFLOW_TRACKING_URI", None)
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    assert r.returncode == 0, f"{cmd}: {r.stderr[-3000:]}"
    return r.stdout


# Expected result 8 does not hold yet on this CPU-sized protocol (hoc's AC stays far below 0.8;
# experiments/sequence/README.md, "Result"): strict, so the day it holds this marker must go.
@pytest.mark.xfail(strict=True, reason="expected result 8 not reproduced yet (issue 13 item 3)")
def test_hoc_stays_compatible_where_er_does_not(tmp_path: Path):
    generate = script("generate")
    spec = _reduced(yaml.safe_load((EXPERIMENT / "sequence.yaml").read_text()))
    (tmp_path / "sequence.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    assert generate.main(["--spec", str(tmp_path / "sequence.yaml"), "--out", str(tmp_path)]) == 0
    (tmp_path / "summarize.py").write_text((EXPERIMENT / "summarize.py").read_text())
    stages = REPO / "stages"
    py = sys.executable
    _run([py, str(stages / "data.py")], tmp_path)
    _run([py, str(stages / "split.py")], tmp_path)
    for version in yaml.safe_load((tmp_path / "params.yaml").read_text())["train"]:
        _run([py, str(stages / "train.py"), version, "--no-progress"], tmp_path)  # parents first
    for method in yaml.safe_load((tmp_path / "evaluate.yaml").read_text()):
        _run(
            [py, str(stages / "evaluate.py"), "--params", "evaluate.yaml", "--section", method,
             "--metrics", f"metrics/{method}", "--plots", f"plots/{method}",
             "--cache", f"cache/embeddings/{method}"],
            tmp_path,
        )  # fmt: skip
    print(_run([py, "summarize.py"], tmp_path))
    summary = json.loads((tmp_path / "metrics/summary.json").read_text())
    for gallery in ("", "-template"):
        hoc, er = (summary[m + gallery]["identification"]["top1"] for m in ("hoc", "er"))
        assert hoc["ac"] > er["ac"] + 0.3, (gallery, hoc, er)
        # Across each replacement hoc's AA holds, er's collapses (its new model is incompatible).
        for task, rep in summary["hoc" + gallery]["replacement"].items():
            assert rep["aa_with"] >= 0.9 * rep["aa_before"], (task, rep)
        for task, rep in summary["er" + gallery]["replacement"].items():
            assert rep["aa_with"] < 0.85 * rep["aa_before"], (task, rep)
