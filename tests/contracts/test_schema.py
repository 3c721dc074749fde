from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.contracts.schema import (
    Contract,
    Criterion,
    canonical_metric,
    check_contract,
    load_contract,
)
from compat.errors import BadInputError, NotFoundError

REPO = Path(__file__).resolve().parents[2]

GOOD = """\
version: v2
parent: v1
embedding_dim: 128
head: cosface
criteria:
  - protocol: identification
    metric: top1
    require: cross > self_parent
    margin: 0.0
    confidence: 0.95
  - protocol: verification
    metric: tar@far=1e-3
    require: cross > self_parent
transitive: [v0]
"""


def _write(tmp_path: Path, text: str, name: str = "v2.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_good_contract(tmp_path: Path):
    c = load_contract(_write(tmp_path, GOOD))
    assert c.parent == "v1" and c.transitive == ["v0"]
    assert c.criteria[1].metric == "tar@far=0.001"  # canonical spelling of 1e-3
    assert c.criteria[0].terms == ("cross", "self_parent")
    assert (
        c.criteria[0].describe("v2", "v1")
        == "identification top1: M(v2, v1) > M(v1, v1) at 95% confidence"
    )


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("head: cosface", "head: cosfase", "v2.yaml: head: unknown head 'cosfase'"),
        (
            "embedding_dim: 128",
            "embedding_dim: 128\nembeding_dim: 64",
            "v2.yaml: embeding_dim: Extra inputs are not permitted",
        ),
        ("metric: top1", "metric: top0.5", "v2.yaml: criteria.0.metric: unknown metric"),
        (
            "require: cross > self_parent\n    margin",
            "require: cross >= self_parent\n    margin",
            "criteria.0.require",
        ),
        ("confidence: 0.95", "confidence: 1.5", "criteria.0.confidence"),
        ("protocol: verification", "protocol: verify", "criteria.1.protocol"),
        ("transitive: [v0]", "transitive: [v1]", "v1 is the parent"),
        ("version: v2", "version: v3", "does not match the file name"),
    ],
)
def test_contract_problems_name_file_and_field(tmp_path: Path, old: str, new: str, message: str):
    assert old in GOOD
    path = _write(tmp_path, GOOD.replace(old, new, 1))
    contract, problems = check_contract(path)
    assert contract is None
    assert any(message in p for p in problems), problems
    with pytest.raises(BadInputError):
        load_contract(path)


def test_every_problem_is_reported(tmp_path: Path):
    text = GOOD.replace("head: cosface", "head: nope").replace("metric: top1", "metric: top")
    _, problems = check_contract(_write(tmp_path, text))
    assert len(problems) == 2


def test_malformed_yaml_and_missing_file(tmp_path: Path):
    _, problems = check_contract(_write(tmp_path, "version: [v2\n"))
    assert problems and "not valid YAML" in problems[0]
    with pytest.raises(NotFoundError):
        check_contract(tmp_path / "none.yaml")


def test_parentless_contract_cannot_have_criteria():
    with pytest.raises(ValueError, match="need a parent"):
        Contract(
            version="v1",
            embedding_dim=8,
            head="cosface",
            criteria=[Criterion(protocol="identification", metric="top1")],
        )


def test_canonical_metric():
    assert canonical_metric("tpir@fpir=1e-2") == "tpir@fpir=0.01"
    assert canonical_metric("tar@far=0.0001") == "tar@far=0.0001"
    assert canonical_metric("mAP@100") == "mAP@100"


def test_repository_contracts_validate():
    files = sorted((REPO / "contracts").glob("*.yaml"))
    assert files, "the default chain declares contracts"
    r = CliRunner().invoke(app, ["contract", "validate", *map(str, files)])
    assert r.exit_code == 0, r.output


def test_cli_validate_reports_problems_with_exit_4(tmp_path: Path):
    bad = _write(tmp_path, GOOD.replace("head: cosface", "head: nope"))
    r = CliRunner().invoke(app, ["contract", "validate", str(bad)])
    assert r.exit_code == 4
    assert "v2.yaml: head: unknown head 'nope'" in r.stderr
    r = CliRunner().invoke(app, ["contract", "validate", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 3
