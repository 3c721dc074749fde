"""Issue 31 item 5: a promotion killed at any step leaves a state ``compat verify`` reports
(exit 6, naming it) and ``compat verify --repair`` fixes; real processes, real SIGKILLs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.store import Registry

runner = CliRunner()
KILLER = Path(__file__).with_name("kill_promote.py")


def cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize(
    ("step", "production", "status", "found"),
    [
        ("torn", "v1", "passed", "a torn last line"),
        ("after-pending", "v1", "passed", "a kill before the alias moved"),
        pytest.param(
            *("after-move", "v2", "promoted", "a kill after the alias moved"),
            marks=pytest.mark.slow,
        ),  # ~5 s each: real kills
        pytest.param(
            *("after-commit", "v2", "promoted", "its compat.status is 'passed'"),
            marks=pytest.mark.slow,
        ),  # ~5 s each: real kills
    ],
)
def test_a_killed_promotion_is_reported_and_repaired(project, step, production, status, found):
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli("promote", "v1").exit_code == 0
    env = {**os.environ, "COMPAT_ACTOR": "ci"}
    env.pop("MLFLOW_TRACKING_URI", None)
    killed = subprocess.run(
        [sys.executable, str(KILLER), step, "promote", "v2", "--against", "v1"],
        cwd=project.root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]

    r = cli("verify", "--json")
    assert r.exit_code == 6, r.output
    report = json.loads(r.stdout)
    assert report["drift"] is False and len(report["problems"]) == 1
    assert found in report["problems"][0] and "compat verify --repair" in report["message"]

    r = cli("verify", "--repair", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["problems"] == [] and len(report["repaired"]) == 1
    assert cli("verify").exit_code == 0
    reg = Registry()
    assert reg.production() == production
    assert reg.get("v2").status == status
    assert [p["state"] for p in reg.ledger().promotions()] == (
        ["committed"] if step == "torn" else
        ["committed", "aborted" if step == "after-pending" else "committed"]
    )  # fmt: skip
    # and the next promotion goes on from the repaired state
    if production == "v1":
        assert cli("promote", "v2", "--against", "v1").exit_code == 0
    assert Registry().get("v2").status == "promoted"


def test_a_promotion_repairs_what_a_killed_one_left(project):
    """The gate repairs too, before it moves the alias: no verify needed in between."""
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    project.register("v3", parent="v2", noise=0.5, seed=3)
    assert cli("promote", "v1").exit_code == 0
    env = {**os.environ, "COMPAT_ACTOR": "ci"}
    env.pop("MLFLOW_TRACKING_URI", None)
    killed = subprocess.run(
        [sys.executable, str(KILLER), "after-commit", "promote", "v2", "--against", "v1"],
        cwd=project.root, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert Registry().get("v2").status == "passed"
    r = cli("promote", "v3", "--against", "v2")
    assert r.exit_code == 0, r.output
    assert "v2: compat.status 'passed' -> 'promoted'" in r.stdout
    assert Registry().get("v2").status == "promoted"
