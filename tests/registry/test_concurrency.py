"""Many processes at once: schema creation and the production compare-and-set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.promotions import PromotionLog
from compat.registry.store import Registry


def _spawn(args: list[str], cwd: Path) -> subprocess.Popen:
    env = {**os.environ, "COMPAT_ACTOR": "ci"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen(
        [sys.executable, "-m", "compat.cli.main", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow  # ~9 s: parallel processes open a fresh registry
def test_first_use_from_parallel_processes_does_not_race(project):
    """Writers that create the store at once (MLflow's schema migration under the schema lock)
    while readers look: every registration lands, no reader mistakes the store being created
    for a damaged one (an empty file is exit 5 once nobody is creating it)."""
    names = [f"v{i}" for i in range(1, 4)]
    for i, name in enumerate(names):
        project.contract(name)
        project.bundle(name, project.embeddings(0.8, i))
    writers = [_spawn(["register", n, "--embeddings", f"bundles/{n}.npz"], project.root)
               for n in names]  # fmt: skip
    readers = [_spawn(["versions", "--json"], project.root) for _ in range(3)]
    for p in writers + readers:
        code, err = p.wait(timeout=300), p.stderr.read()
        # a reader before the store exists lists nothing; after, what is there: never exit 5
        assert code == 0 and "Traceback" not in err, err
    listed = json.loads(CliRunner().invoke(app, ["versions", "--json"]).stdout)["versions"]
    assert sorted(v["version"] for v in listed) == names


# Three racers exercise the compare-and-set in the default run; eight (each a process that
# imports compat and MLflow, about 3 s of CPU) are the long check.
@pytest.mark.parametrize("n", [3, pytest.param(8, marks=pytest.mark.slow)])
def test_concurrent_promotions_against_the_same_parent(project, n):
    runner = CliRunner()
    project.contract("v1")
    assert (
        runner.invoke(
            app,
            [
                "register",
                "v1",
                "--embeddings",
                str(project.bundle("v1", project.embeddings(1.5, 1))),
            ],
        ).exit_code
        == 0
    )
    assert runner.invoke(app, ["promote", "v1"]).exit_code == 0
    names = [f"v2{chr(ord('a') + i)}" for i in range(n)]
    for i, name in enumerate(names):
        project.contract(name, parent="v1")
        b = project.bundle(name, project.embeddings(0.8, 10 + i))
        assert runner.invoke(app, ["register", name, "--embeddings", str(b)]).exit_code == 0

    procs = {
        n: _spawn(["promote", n, "--against", "v1", "--json", "--bootstrap", "100"], project.root)
        for n in names
    }
    results = {n: (p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for n, p in procs.items()}

    for n, (code, _, err) in results.items():
        assert code in (0, 6), f"{n}: exit {code}: {err}"
        assert "Traceback" not in err
    winners = [n for n, (code, _, _) in results.items() if code == 0]
    assert len(winners) == 1, results
    winner = winners[0]
    assert json.loads(results[winner][1])["moved"] is True
    for code, _, err in results.values():
        if code == 6:
            assert f"production is '{winner}'" in err
    assert Registry().production() == winner
    promos = PromotionLog("registry").promotions()
    assert [(p["from"], p["to"], p["state"]) for p in promos] == [
        (None, "v1", "committed"),
        ("v1", winner, "committed"),
    ]


SLOW = Path(__file__).with_name("slow_register.py")


def _race_registrations(project, bundles: list[Path]) -> list[tuple[int, str, str]]:
    """``compat register v4 --embeddings B`` for each bundle, in processes started together,
    each lookup that finds nothing slowed (slow_register.py) so every one of them reads "not
    registered" before any writes."""
    env = {**os.environ, "COMPAT_ACTOR": "ci"}
    env.pop("MLFLOW_TRACKING_URI", None)
    procs = [
        subprocess.Popen(
            [sys.executable, str(SLOW), "2", "register", "v4", "--embeddings", str(b)],
            cwd=project.root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for b in bundles
    ]
    return [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in procs]


def _registered(name: str) -> list[str]:
    return [r.mlflow_version for r in Registry().versions() if r.name == name]


def test_concurrent_registrations_of_one_name_create_one_version(project):
    project.contract("v4")
    bundle = project.bundle("v4", project.embeddings(0.8, 4))
    results = _race_registrations(project, [bundle, bundle])
    for code, _, err in results:
        assert code == 0, err
        assert "Traceback" not in err
    outs = sorted(out for _, out, _ in results)
    assert "already registered (same weights)" in outs[0], outs
    assert "v4: registered as MLflow version" in outs[1], outs
    assert len(_registered("v4")) == 1  # before issue 31: MLflow versions 1 and 2, both "v4"


@pytest.mark.slow  # ~10 s: the same-weights race above stays in the default run
def test_concurrent_registrations_of_one_name_with_other_weights(project):
    project.contract("v4")
    first = project.bundle("v4", project.embeddings(0.8, 4))
    other = project.root / "bundles" / "v4-other.npz"
    first.rename(other)
    second = project.bundle("v4", project.embeddings(0.8, 5))
    results = _race_registrations(project, [other, second])
    assert sorted(code for code, _, _ in results) == [0, 4], results
    (err,) = [err for code, _, err in results if code == 4]
    assert "is already registered" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert len(_registered("v4")) == 1
