"""A contract that would check no rows, or ignore what it says, is refused by validation, by
``compat contract validate`` and by promote alike (issue 43 item 1); the default rollback
criterion is the forward-compatibility direction, M(V, S) against M(V, V)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.contracts.schema import check_contract, load_contract

V2 = """\
version: v2
parent: v1
embedding_dim: 128
head: cosface
criteria:
  - {protocol: identification, metric: top1, require: cross > self_parent, confidence: 0.95}
  - {protocol: identification, metric: mAP}
  - {protocol: identification, metric: top1, require: forward > cross}
transitive: [v0]
"""


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "v2.yaml"
    path.write_text(V2 + extra)
    return path


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ("rollback: {serve: []}", "rollback.serve", "an empty list checks no rows"),
        ("rollback: {criteria: []}", "rollback.criteria", "an empty list checks no rows"),
        ("rollback: {serve: [v1]}", "rollback.serve", "v1: checked by the contract's own"),
        ("rollback: {serve: [v0, v3]}", "rollback.serve", "v0: checked by the contract's own"),
        ("rollback: {serve: [v3, v3]}", "rollback.serve", "a version is listed twice"),
        (
            "rollback: {criteria: [{protocol: identification, metric: top1, require: forward > self}]}",
            "rollback.criteria",
            "a rollback has no psi of the served rows",
        ),
        ("serve: {mode: native, map: maps/x}", "serve", "map 'maps/x': a native version is served"),
    ],
)
def test_a_configuration_that_checks_nothing_or_ignores_a_key_is_refused(
    tmp_path, extra, field, reason
):
    path = _write(tmp_path, extra + "\n")
    contract, problems = check_contract(path)
    assert contract is None
    assert any(p.startswith(f"{path}: {field}: ") and reason in p for p in problems), problems
    r = CliRunner().invoke(app, ["contract", "validate", str(path), "--json"])
    assert r.exit_code == 4, r.output
    [found] = json.loads(r.stdout)["files"]
    assert any(x["field"] == field and reason in x["reason"] for x in found["problems"])


def test_the_default_rollback_criteria_are_cross_over_self_once_per_metric(tmp_path):
    contract = load_contract(_write(tmp_path, ""))
    criteria = contract.rollback_criteria()
    assert [(c.protocol, c.metric, c.require, c.margin, c.confidence) for c in criteria] == [
        ("identification", "top1", "cross > self", 0.0, None),
        ("identification", "mAP", "cross > self", 0.0, None),
    ]  # forward has no rollback counterpart; top1 once
    assert contract.rollback_key(0) == "rollback.criteria"
    assert criteria[0].describe("v2", "v3") == "identification top1: M(v2, v3) > M(v2, v2)"


def test_written_rollback_criteria_default_to_cross_over_self_too(tmp_path):
    contract = load_contract(
        _write(
            tmp_path,
            "rollback:\n  criteria: [{protocol: identification, metric: top1, margin: -0.1}]\n",
        )
    )
    [c] = contract.rollback_criteria()
    assert (c.require, c.margin) == ("cross > self", -0.1)
    assert contract.rollback_key(0) == "rollback.criteria.0"


def test_a_serve_with_a_mode_keeps_its_map(tmp_path):
    text = V2.replace("transitive: [v0]\n", "").replace(
        "  - {protocol: identification, metric: top1, require: forward > cross}\n", ""
    )
    path = tmp_path / "v2.yaml"
    path.write_text(text + "serve: {mode: query-adapter, map: maps/x}\n")
    assert load_contract(path).serve.map == "maps/x"
