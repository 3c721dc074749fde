"""The GitHub Actions workflow is linted like code: zizmor (a workflow linter from PyPI: template
injection, unpinned actions, credentials left in the checkout, broad permissions), the GitHub
workflow JSON schema (check-jsonschema's vendored copy), and a rule neither checks: an ``if:``
may read only values visible where it is evaluated (a step's ``if`` sees the workflow's and the
job's ``env``, never the step's own; a job's ``if`` sees no ``env``; no ``if`` sees ``secrets``)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ENV_REF = re.compile(r"\benv\.([A-Za-z_][A-Za-z0-9_]*)")


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(path).exists():
        pytest.fail(f"{name} is not installed: pip install -e '.[dev]'")
    return path


def invisible_in_ifs(workflow: dict) -> list[str]:
    """Every ``if:`` that reads a value not visible where it is evaluated."""
    problems = []
    top = set((workflow.get("env") or {}).keys())
    for job_name, job in (workflow.get("jobs") or {}).items():
        job_env = top | set((job.get("env") or {}).keys())
        cond = str(job.get("if", ""))
        if ENV_REF.search(cond) or "secrets." in cond:
            problems.append(f"jobs.{job_name}.if: a job's if sees neither env nor secrets")
        for i, step in enumerate(job.get("steps") or []):
            cond = str(step.get("if", ""))
            where = f"jobs.{job_name}.steps[{i}] ({step.get('name') or step.get('uses')})"
            if "secrets." in cond:
                problems.append(f"{where}.if: secrets are not visible in if")
            for name in ENV_REF.findall(cond):
                if name not in job_env:
                    own = " (defined in the step's own env, which its if cannot see)"
                    problems.append(
                        f"{where}.if: env.{name} is not in the workflow's or job's env"
                        + (own if name in (step.get("env") or {}) else "")
                    )
    return problems


def test_the_visibility_rule_catches_a_step_env_read_by_its_own_if():
    bad = {
        "jobs": {
            "gate": {
                "if": "secrets.X != ''",
                "steps": [{"name": "remote", "if": "env.URL != ''", "env": {"URL": "x"}}],
            }
        }
    }
    assert invisible_in_ifs(bad) == [
        "jobs.gate.if: a job's if sees neither env nor secrets",
        "jobs.gate.steps[0] (remote).if: env.URL is not in the workflow's or job's env "
        "(defined in the step's own env, which its if cannot see)",
    ]
    bad["env"] = {"URL": "${{ secrets.URL }}"}
    del bad["jobs"]["gate"]["if"]
    assert invisible_in_ifs(bad) == []


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_if_reads_visible_values(workflow):
    assert invisible_in_ifs(yaml.safe_load(workflow.read_text(encoding="utf-8"))) == []


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_zizmor_finds_nothing(workflow):
    r = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_the_workflow_schema_holds(workflow):
    r = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(workflow)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _gate_workflow() -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / "compat-gate.yml").read_text(encoding="utf-8"))  # fmt: skip


def test_the_workflow_uploads_the_gate_report():
    jobs = _gate_workflow()["jobs"]
    for name in ("pull-request", "promote"):
        steps = jobs[name]["steps"]
        gate = [s for s in steps if "ci_gate.py" in str(s.get("run", ""))]
        assert gate and all("--report gate" in s["run"] for s in gate), name
        upload = [s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact@")]
        assert upload and upload[0]["with"]["path"] == "gate/", name


def _secrets(obj) -> set[str]:
    """The secrets a job (or step) reads anywhere in its definition."""
    return set(re.findall(r"secrets\.([A-Za-z_][A-Za-z0-9_]*)", yaml.safe_dump(obj)))


def test_only_the_protected_branch_holds_write_credentials():
    """Issue 43 item 3: a pull request runs its own code (scripts/ci_gate.py included), so its
    job gets a read-only registry credential and no promotion-log database; the write
    credentials are read only by the job that runs on main, through a protected environment."""
    flow = _gate_workflow()
    writes = {"MLFLOW_TRACKING_URI", "COMPAT_REGISTRY_DATABASE"}
    reads = {"MLFLOW_TRACKING_URI_READONLY", "COMPAT_REGISTRY_DATABASE_READONLY", "DVC_REMOTE_URL"}
    assert not _secrets(flow.get("env") or {}), "no secret at the workflow's level"
    jobs = flow["jobs"]
    pr, fork, promote = jobs["pull-request"], jobs["fork"], jobs["promote"]
    assert _secrets(pr) == reads
    assert not _secrets(pr) & writes and "environment" not in pr
    assert not _secrets(fork) and "environment" not in fork
    assert writes <= _secrets(promote) and promote["environment"] == "compat-registry"
    assert [n for n, j in jobs.items() if writes & _secrets(j)] == ["promote"]
    # who runs where: same-repository pull requests, forks, and main (push or dispatch)
    same = "github.event.pull_request.head.repo.full_name == github.repository"
    other = "github.event.pull_request.head.repo.full_name != github.repository"
    assert same in pr["if"] and "github.event_name == 'pull_request'" in pr["if"]
    assert other in fork["if"] and "github.event_name == 'pull_request'" in fork["if"]
    assert "github.event_name != 'pull_request'" in promote["if"]
    assert "github.ref == 'refs/heads/main'" in promote["if"]
    # the pull request's gate is a dry run that comments; every run names no candidate inline
    [gate] = [s for s in pr["steps"] if "ci_gate.py" in str(s.get("run", ""))]
    assert "--dry-run" in gate["run"] and "--comment" in gate["run"]
    assert pr["permissions"] == {"contents": "read", "pull-requests": "write"}
    [run] = [s for s in promote["steps"] if "ci_gate.py" in str(s.get("run", ""))]
    assert "--dry-run" not in run["run"] and "${{" not in run["run"]  # inputs via env only


def test_a_dispatch_can_roll_back_with_its_reason():
    flow = _gate_workflow()
    inputs = flow[True]["workflow_dispatch"]["inputs"]  # YAML 1.1 reads `on:` as True
    assert inputs["rollback"]["type"] == "boolean" and "accept_loss" in inputs
    env = flow["jobs"]["promote"]["env"]
    assert env["ROLLBACK"] == "${{ github.event.inputs.rollback }}"
    assert env["ACCEPT_LOSS"] == "${{ github.event.inputs.accept_loss }}"
    [run] = [s["run"] for s in flow["jobs"]["promote"]["steps"] if "ci_gate.py" in str(s.get("run", ""))]  # fmt: skip
    assert "--rollback" in run and '--accept-loss "$ACCEPT_LOSS"' in run
