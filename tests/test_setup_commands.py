"""The README's two set-up commands, .ci/run and the lock files agree.

.ci/run runs exactly the README's test command; both commands install from the lock files in
requirements/ (constraints: every dependency pinned to the version the tests ran with), and the
locks pin every dependency pyproject.toml declares, at versions its ranges allow."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def _pins(lock: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / lock).read_text(encoding="utf-8").splitlines():
        if m := re.match(r"^([A-Za-z0-9._-]+)==(\S+)", line):
            pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def test_ci_runs_the_readmes_test_command():
    install, test = _readme_commands()[:2]
    assert "-c requirements/base.txt" in install and install.endswith("&& dvc repro")
    assert "-c requirements/dev.txt" in test and test.endswith("&& pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == test


def test_the_locks_pin_every_dependency_within_pyprojects_ranges():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    wanted = {
        "base.txt": list(project["dependencies"]),
        "dev.txt": [
            *project["dependencies"],
            *extras["dev"],
            *extras["lance"],
            *extras["ray"],
            *extras["shared"],
        ],
    }
    for lock, requirements in wanted.items():
        pins = _pins(lock)
        for raw in requirements:
            req = Requirement(raw)
            name = canonicalize_name(req.name)
            if name == "compat":  # the dev extra names the project's own extras
                continue
            assert name in pins, f"requirements/{lock} does not pin {req.name}"
            assert req.specifier.contains(pins[name], prereleases=True), (
                f"requirements/{lock}: {req.name}=={pins[name]} is outside {raw!r}"
            )
    assert not any(line.startswith(("-e", "--", "compat")) for line in
                   (ROOT / "requirements" / "dev.txt").read_text().splitlines())  # fmt: skip
