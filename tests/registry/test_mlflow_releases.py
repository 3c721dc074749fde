"""The registry against the oldest and the newest MLflow release pyproject.toml allows.

pyproject.toml declares ``mlflow>=3.9,<3.18``; what is declared is what is tested: each bound's
release is installed beside the project (``pip install --no-deps --target``, so the other
dependencies are the locked ones) and the registry's reader tests, a registration and a gate run
against it in a fresh process. Slow (a download and a few minutes a release):
``pytest -m slow tests/registry/test_mlflow_releases.py``; CI's ``mlflow-releases`` job runs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The oldest release that installs and works here (3.8 imports a SQLAlchemy pool class that
# SQLAlchemy 2.1 no longer has) and the newest that installs (3.18.0 pins an mlflow-tracing
# release the index does not have).
OLDEST, NEWEST = "3.9.0", "3.17.2"
PACKAGES = ("mlflow", "mlflow-skinny", "mlflow-tracing")


def _declared() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return next(d for d in deps["dependencies"] if re.match(r"mlflow\b", d))


def test_the_tested_releases_are_the_declared_range():
    """Not slow: the bounds this file tests are the range pyproject.toml declares."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    spec = Requirement(_declared()).specifier
    assert OLDEST in spec and NEWEST in spec
    assert Version(OLDEST) == min(Version(s.version) for s in spec if s.operator == ">=")
    assert (
        Version(NEWEST).release[:2]
        < Version(next(s.version for s in spec if s.operator == "<")).release[:2]
    )


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("release", [OLDEST, NEWEST])
def test_the_registry_works_with_the_release(release, tmp_path):
    target = tmp_path / f"mlflow-{release}"
    pins = [f"{name}=={release}" for name in PACKAGES]
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), *pins],
        check=True,
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}
    check = subprocess.run(
        [sys.executable, "-c", "import mlflow; print(mlflow.__version__)"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert check.stdout.strip() == release
    tests = [
        "tests/registry/test_reader.py",
        "tests/registry/test_promote.py",
        "tests/registry/test_mlflow_model.py",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *tests],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, f"mlflow {release}:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"
