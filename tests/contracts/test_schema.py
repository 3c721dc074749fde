from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.contracts.schema import (
    Contract,
    Criterion,
    _registered_heads,
    canonical_metric,
    check_contract,
    head_names,
    load_contract,
    protocol_options,
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
    from compat.evaluate import metrics as M

    assert canonical_metric is M.canonical_metric  # one function, re-exported
    assert canonical_metric("tpir@fpir=1e-2") == "tpir@fpir=0.01"
    assert canonical_metric("tar@far=0.0001") == "tar@far=0.0001"
    assert canonical_metric("mAP@100") == "mAP@100"
    # The two old functions disagreed here; the name must equal the key reports use.
    assert canonical_metric("tar@far=1e-5") == "tar@far=0.00001" == M.tar_key(1e-5)
    for bad in ("tar@far=abc", "tar@far=0", "tpir@fpir=1.5", "tar@far=100%"):
        with pytest.raises(ValueError):
            canonical_metric(bad)


@pytest.mark.parametrize(
    ("protocol", "metric", "message"),
    [
        ("identification", "tpir@fpir=0.01", "unknown metric 'tpir@fpir=0.01' for identification"),
        ("open-set", "tar@far=0.01", "unknown metric 'tar@far=0.01' for open-set"),
        ("verification", "top1", "unknown metric 'top1' for verification"),
        ("verification", "tar@far=2", "the rate must lie in (0, 1)"),
        ("identification", "top0", "unknown metric 'top0'"),
        ("identification", "map", "unknown metric 'map'"),
    ],
)
def test_a_metric_the_protocol_cannot_compute_fails_validation(
    tmp_path: Path, protocol: str, metric: str, message: str
):
    text = GOOD.replace(
        "protocol: verification\n    metric: tar@far=1e-3",
        f"protocol: {protocol}\n    metric: {metric}",
    )
    assert text != GOOD
    contract, problems = check_contract(_write(tmp_path, text))
    assert contract is None
    assert any(
        p.startswith(f"{tmp_path / 'v2.yaml'}: criteria.1.metric: ") and message in p
        for p in problems
    ), problems
    r = CliRunner().invoke(app, ["contract", "validate", str(tmp_path / "v2.yaml")])
    assert r.exit_code == 4 and "criteria.1.metric" in r.stderr


def test_metrics_beyond_the_defaults_configure_the_protocols(tmp_path: Path):
    text = GOOD.replace("metric: tar@far=1e-3", "metric: tar@far=1e-4").replace(
        "metric: top1", "metric: top20"
    )
    c = load_contract(_write(tmp_path, text))
    assert c.criteria[1].metric == "tar@far=0.0001"
    assert protocol_options(c.criteria) == {
        "identification": {"ks": (1, 5, 10, 20), "map_k": 100},
        "verification": {"fars": (0.1, 0.01, 0.001, 0.0001)},
    }
    more = [
        Criterion(protocol="identification", metric="mAP@50"),
        Criterion(protocol="open-set", metric="tpir@fpir=0.05"),
    ]
    assert protocol_options(more) == {
        "identification": {"ks": (1, 5, 10), "map_k": 50},
        "open-set": {"fpirs": (0.1, 0.05, 0.01)},
    }


def test_two_map_cutoffs_cannot_be_computed_together(tmp_path: Path):
    text = GOOD.replace(
        "transitive: [v0]",
        "  - protocol: identification\n    metric: mAP@50\n"
        "  - protocol: identification\n    metric: mAP@100\ntransitive: [v0]",
    )
    contract, problems = check_contract(_write(tmp_path, text))
    assert contract is None
    assert problems == [
        f"{tmp_path / 'v2.yaml'}: criteria.3.metric: identification reports mAP@k for one k, "
        "not for [50, 100]"
    ]


def test_names_come_from_the_catalogs():
    import compat.models.heads as heads
    from compat.evaluate.protocols import PROTOCOLS

    assert _registered_heads(heads.__loader__.get_source(heads.__name__)) == heads.HEADS.names()
    assert head_names() == heads.HEADS.names()
    assert "dsimplex" in head_names()
    with pytest.raises(ValueError, match="known: identification, open-set, verification"):
        Criterion(protocol="ranking", metric="top1")
    assert PROTOCOLS.names() == ["identification", "open-set", "verification"]


def test_validation_imports_no_torch(tmp_path: Path):
    import subprocess
    import sys

    path = _write(tmp_path, GOOD)
    code = (
        "import sys\nfrom compat.contracts.schema import check_contract\n"
        f"c, p = check_contract({str(path)!r})\n"
        "assert c is not None and not p, p\nassert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


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
