"""Issue 45 item 5, the records read back: a promotion log line with the right keys and the
wrong types, verdict tags edited by hand as MLflow's UI allows, a registry row with a
non-integer ``creation_time``. Each is the project's one line naming the record, with exit 4
(the log, the tags) or 5 (a damaged registry database), in every command that reads it."""

from __future__ import annotations

import json
import shutil
import sqlite3
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from tests.conftest import one_line_error

runner = CliRunner()


@pytest.fixture(scope="module")
def promoted_once(tmp_path_factory, registry_template):
    """v1 and v2 registered and promoted once per module (each test gets a copy)."""
    from tests.registry.conftest import Project

    root = tmp_path_factory.mktemp("promoted")
    shutil.copytree(registry_template, root / "registry")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        project = Project(root)
        project.register("v1", noise=1.5, seed=1)
        project.register("v2", parent="v1", noise=0.5, seed=3)
        assert runner.invoke(app, ["promote", "v1"]).exit_code == 0
        assert runner.invoke(app, ["promote", "v2", "--against", "v1"]).exit_code == 0
    return root


@pytest.fixture()
def promoted(promoted_once, tmp_path, monkeypatch):
    root = tmp_path / "p"
    shutil.copytree(promoted_once, root)  # a copied store is re-pointed by compat itself
    monkeypatch.chdir(root)
    return SimpleNamespace(root=root)


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("id", ["x"], "id: Input should be a valid string"),
        ("id", {"a": 1}, "id: Input should be a valid string"),
        ("contract_sha256", 12, "contract_sha256: Input should be a valid string"),
        ("state", 3, "state: Input should be"),
        ("to", ["v2"], "to: Input should be a valid string"),
    ],
)
def test_a_log_line_of_the_wrong_types_is_named(promoted, field, value, said):
    log = promoted.root / "registry" / "promotions.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    lines[-2][field] = value  # v2's pending line
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    where = f"promotions.jsonl:{len(lines) - 1}: "
    for args in (["log"], ["verify"], ["log", "--json"]):
        one_line_error(runner.invoke(app, args), 4, where, said)
    r = runner.invoke(app, ["versions"])
    assert r.exit_code == 0 and r.stderr.startswith("warning: promotion log not read: ")


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("compat.checks", "[{}]", "v2: tag compat.checks: 0.protocol: Field required"),
        ("compat.checks", '[{"gallery": "v1", "protocol": "identification", "metric": "top1", '
         '"margin": "x", "verdict": "pass"}]', "v2: tag compat.checks: 0.margin"),
        ("compat.checks", "{not json", "v2: tag compat.checks: not JSON"),
        ("compat.gains", '{"identification": [1]}', "v2: tag compat.gains: identification"),
        ("compat.gains", '{"identification": {"top1": {"value": "x"}}}',
         "v2: tag compat.gains: identification.top1.value"),
    ],
)  # fmt: skip
def test_a_verdict_tag_edited_by_hand_is_named(promoted, key, value, said):
    from compat.registry.store import Registry

    reg = Registry(root=promoted.root / "registry")
    reg.set_tags(reg.get("v2"), {key: value})
    for args in (["show", "v2"], ["show", "v2", "--json"]):
        one_line_error(runner.invoke(app, args), 4, said)
    if key == "compat.checks":
        for args in (["chain", "v2"], ["chain", "v2", "--json"]):
            one_line_error(runner.invoke(app, args), 4, said)


@pytest.mark.parametrize("created", ["abc", 1.5])
def test_a_registry_row_with_a_non_integer_creation_time_is_a_damaged_registry(promoted, created):
    db = promoted.root / "registry" / "mlflow.db"
    with sqlite3.connect(db) as con:
        con.execute("UPDATE model_versions SET creation_time = ? WHERE version = 2", (created,))
    for args in (["versions"], ["show", "v2"], ["chain", "v2"]):
        one_line_error(runner.invoke(app, args), 5, "mlflow.db: model version 2: creation_time: ",
                  "a damaged registry")  # fmt: skip
