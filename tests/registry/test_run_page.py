"""The story a version's MLflow run page tells: its note, its training window, the verdict's
tables and heatmaps (compat/registry/run_page.py, record.training_window)."""

from __future__ import annotations

from types import SimpleNamespace

from compat.contracts.gate import CriterionResult, Verdict
from compat.registry.record import training_window
from compat.registry.run_page import (
    heatmaps,
    matrix_rows,
    run_matrix,
    verdict_html,
    verdict_paragraph,
)


def _verdict() -> Verdict:
    result = CriterionResult(
        protocol="identification", metric="top1", require="cross > self_parent", gallery="v1",
        lhs=["v2"], rhs=["v1"], margin=0.0, confidence=0.95,
        description="identification top1: M(v2, v1) > M(v1, v1)", lhs_value=0.525,
        rhs_value=0.325, difference=0.2, lower_bound=0.15, passed=True,
    )  # fmt: skip
    return Verdict(
        version="v2", parent="v1", passed=True, results=[result],
        matrix={"identification": {"top1": {"v2": {"v1": 0.525, "v2": 0.6}, "v1": {"v1": 0.325}}}},
        gain={"identification": {"top1": {"value": 0.4, "paragon": "v2p", "meaningful": True,
                                          "reason": "criterion holds"}}},
    )  # fmt: skip


def test_the_note_is_the_verdict_in_one_paragraph():
    text = verdict_paragraph(_verdict(), "v1")
    assert "\n" not in text
    assert text == (
        "v2 PASSED its compatibility contract with v1 (1 of 1 checks pass). identification "
        "top1: M(v2, v1) > M(v1, v1) passes: 52.5% vs 32.5%, +20.0 pts, lower bound +15.0 pts. "
        "Update gain on identification top1 against paragon v2p: 40.0%. Promotion requested "
        "against v1 (production at the time)."
    )


def test_training_window_from_the_card():
    card = SimpleNamespace(created_at="2026-01-02T03:04:05+00:00", wall_seconds=60.5)
    start, end = training_window(card)
    assert end - start == 60_500 and end % 1000 == 0
    assert training_window(SimpleNamespace(created_at=None, wall_seconds=1.0)) is None
    assert training_window(SimpleNamespace(created_at="not a date", wall_seconds=1.0)) is None


def test_matrix_tables_hold_every_protocol_of_the_versions_judged(tmp_path):
    evaluated = {
        "identification": {"top1": {"v2": {"v1": 0.5}, "v3": {"v2": 0.9}}},
        "verification": {"tar@far=0.1": {"v2": {"v1": 0.7, "v2": 0.8}, "v1": {"v1": 0.6}}},
    }
    m = run_matrix(_verdict(), evaluated)
    assert list(m) == ["identification", "verification"]  # the gate's protocols first
    assert m["identification"]["top1"]["v2"]["v1"] == 0.525  # the gate's own number kept
    assert "v3" not in m["identification"]["top1"]  # not a version of this verdict
    assert len(matrix_rows(m)) == 3 + 3
    page = verdict_html(_verdict(), "v1", m)
    assert page.index("<td>v1</td>") < page.index("<td>v2</td>")  # oldest version first
    assert "verification: M[query][gallery]" in page and "80.0%" in page

    from PIL import Image

    for path in heatmaps(m, tmp_path):
        width, _ = Image.open(path).size
        assert width <= 1000, (path.name, width)  # legible at MLflow's artifact-view width


def test_the_table_tag_has_the_shape_log_table_writes(tmp_path):
    """run_page writes its verdict tables as files and sets ``mlflow.loggedArtifacts`` itself
    (log_table's read-modify-write of the file races); the tag must stay what MLflow's own
    log_table records, or the UI stops showing the tables: checked against this MLflow."""
    import json

    from mlflow import MlflowClient

    from compat.registry.run_page import FOLDER, log_verdict_pages

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'm.db'}")
    exp = client.create_experiment("e", artifact_location=(tmp_path / "a").as_uri())
    ours, theirs = (client.create_run(exp).info.run_id for _ in range(2))
    client.log_table(theirs, {"a": [1, 2]}, f"{FOLDER}/checks.json")
    reg = SimpleNamespace(call=lambda fn, *a, **k: getattr(client, fn)(*a, **k))
    log_verdict_pages(reg, ours, _verdict(), "v1", None)
    want = json.loads(client.get_run(theirs).data.tags["mlflow.loggedArtifacts"])
    got = json.loads(client.get_run(ours).data.tags["mlflow.loggedArtifacts"])
    assert {"path": f"{FOLDER}/checks.json", "type": "table"} in got
    assert want == [{"path": f"{FOLDER}/checks.json", "type": "table"}]
    assert all(set(entry) == set(want[0]) for entry in got)
