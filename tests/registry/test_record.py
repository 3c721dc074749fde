"""What a verdict writes onto the registered version."""

from __future__ import annotations

import hashlib
import json

import pytest

from compat.contracts.gate import CriterionResult, Verdict
from compat.errors import BadInputError
from compat.registry.describe import describe
from compat.registry.record import (
    evaluation_files,
    metric_key,
    seal,
    training_history,
    verdict_metrics,
    verdict_tags,
)
from compat.registry.tags import checks_from_tags, gains_from_tags


def _verdict() -> Verdict:
    common = dict(gallery="v1", lhs=["v2"], rhs=["v1"], margin=0.0, confidence=None,
                  description="top1 cross > self_parent")  # fmt: skip
    return Verdict(
        version="v2", parent="v1", passed=False,
        results=[
            CriterionResult(protocol="identification", metric="top1", require="cross > self_parent",
                            lhs_value=0.5, rhs_value=0.4, difference=0.1, lower_bound=0.05,
                            passed=True, **common),
            CriterionResult(protocol="identification", metric="top1", require="forward > cross",
                            lhs_value=None, rhs_value=0.4, difference=None, lower_bound=None,
                            passed=False, **common),
        ],
        gain={"identification": {"top1": {
            "value": 0.25, "paragon": "v2p", "meaningful": False,
            "reason": "check failed: identification top1 forward > cross on v1"}}},
    )  # fmt: skip


def test_seal_digests_the_sorted_report():
    report = {"b": 1, "a": [1, 2]}
    blob = seal(report)
    assert blob == json.dumps({"a": [1, 2], "b": 1}, sort_keys=True, indent=2).encode()
    assert report["report_sha256"] == hashlib.sha256(blob).hexdigest()


def test_verdict_tags():
    tags = verdict_tags(_verdict(), "now")
    assert tags["compat.status"] == "failed" and tags["compat.verdict.at"] == "now"
    assert sorted(k for k in tags if k.startswith("compat.check.")) == [
        "compat.check.v1.identification.top1",
        "compat.check.v1.identification.top1.forward",
    ]
    assert tags["compat.check.v1.identification.top1"] == "pass +0.1000"
    assert tags["compat.check.v1.identification.top1.forward"] == "fail n/a"
    # a gain is never a bare number when it means nothing (a check of the pair failed)
    assert tags["compat.gain.identification"] == "0.2500 (not meaningful)"
    assert gains_from_tags(tags) == _verdict().gain  # the whole object, as promote printed it
    assert tags["compat.verdict.kind"] == "promotion"
    # every check whole, as promote's --json has it: what show and chain read back
    checks = json.loads(tags["compat.checks"])
    assert checks == _verdict().checks()
    assert checks[0] == {
        "protocol": "identification", "metric": "top1", "gallery": "v1", "role": "parent",
        "require": "cross > self_parent", "margin": 0.0, "confidence": None, "new": 0.5,
        "baseline": 0.4, "difference": 0.1, "lower_bound": 0.05, "gain": None,
        "gain_meaningful": None, "verdict": "pass",
    }  # fmt: skip
    assert checks_from_tags(tags) == checks and checks_from_tags(tags, "v2") == []
    # a verdict recorded before compat.checks existed: the per-check tags, other fields null
    old = {k: v for k, v in tags.items() if k != "compat.checks"}
    legacy = checks_from_tags(old)
    assert [(c["metric"], c["difference"], c["verdict"], c["new"]) for c in legacy] == [
        ("top1", 0.1, "pass", None), ("top1", None, "fail", None)
    ]  # fmt: skip
    assert legacy[1]["require"] == "forward > cross" and set(legacy[0]) == set(checks[0])


def test_description_is_one_rounded_line_per_check_for_people():
    text = describe(_verdict(), "v1")
    assert text.splitlines() == [
        "v2 FAILED its compatibility contract with v1.",
        "",
        "- pass: top1 cross > self_parent: 50.0% vs 40.0%, +10.0 pts, lower bound +5.0 pts",
        "- FAIL: top1 cross > self_parent: n/a vs 40.0%, n/a",
        "- update gain, identification top1 (paragon v2p): 25.0% (not meaningful: check failed: "
        "identification top1 forward > cross on v1)",
        "",
        "Promotion requested against v1 (production at the time).",
    ]


def test_description_of_a_root_version_says_no_none_true_or_false():
    root = Verdict(version="v1", parent=None, passed=True)
    text = describe(root, None)
    assert text == (
        "v1 has no parent: it has no compatibility criteria to check.\n\n"
        "Promotion requested while no version was production."
    )
    for word in ("None", "True", "False"):
        assert word not in text and word not in describe(_verdict(), None)


def test_description_rounds_and_explains_gains():
    v = _verdict()
    v.results[0].lhs_value, v.results[0].difference = 0.5250000000000001, 0.12345678901234
    v.gain = {
        "verification": {
            "tar@far=0.1": {"value": -0.5, "meaningful": False, "paragon": "p",
                            "reason": "criterion fails"},
            "tar@far=0.01": {"value": None, "meaningful": False, "paragon": "p",
                             "reason": "paragon does not beat the old self test"},
        }
    }  # fmt: skip
    lines = describe(v, "v1").splitlines()
    assert "52.5% vs 40.0%, +12.3 pts" in lines[2]
    assert lines[4:6] == [
        "- update gain, verification tar@far=0.01 (paragon p): undefined "
        "(paragon does not beat the old self test)",
        "- update gain, verification tar@far=0.1 (paragon p): -50.0% "
        "(not meaningful: criterion fails)",
    ]


def test_metric_keys_are_valid_mlflow_names():
    from mlflow.utils.validation import _validate_metric_name

    assert metric_key("matrix", "verification", "tar@far=0.1", "v2_on_psi(v1)") == (
        "matrix/verification/tar_at_far_0.1/v2_on_psi-v1"
    )
    assert metric_key("gain", "identification", "mAP@100") == "gain/identification/mAP_at_100"
    v = _verdict()
    v.gain["verification"] = {"tar@far=0.1": {"value": 0.3, "meaningful": True}}
    for key in verdict_metrics(v):
        _validate_metric_name(key)


def test_verdict_metrics_are_few_and_sort_after_the_training_curves():
    """Cells and checks are tables (run_page), not one-bar charts; a gain is a metric only when
    it is meaningful; every key sorts after ``train/`` in MLflow's metric view."""
    v = _verdict()
    v.matrix = {"identification": {"top1": {"v2": {"v1": 0.5, "psi(v1)": None}, "v1": {"v1": 0.4}}}}
    assert verdict_metrics(v) == {"verdict/passed": 0.0, "verdict/checks_failed": 1.0}
    v.gain["identification"]["top1"]["meaningful"] = True
    v.gain["verification"] = {"tar@far=0.1": {"value": None, "meaningful": False}}
    got = verdict_metrics(v)
    assert got == {
        "verdict/passed": 0.0,
        "verdict/checks_failed": 1.0,
        "verdict/gain/identification/top1": 0.25,
    }
    assert all(k > "train/~" for k in got)


def test_gains_read_back_from_tags_written_before_compat_gains():
    old = {"compat.gain.identification": "0.4100", "compat.gain.verification": "1.3100 (not meaningful)",
           "compat.gain.bad": "n/a"}  # fmt: skip
    got = gains_from_tags(old)
    assert got == {
        "identification": {"*": {"paragon": None, "value": 0.41, "meaningful": None, "reason": None}},
        "verification": {"*": {"paragon": None, "value": 1.31, "meaningful": False, "reason": None}},
    }  # fmt: skip
    # a compat.gains edited into something else is exit 4 naming it, not another verdict
    with pytest.raises(BadInputError, match=r"^v2: tag compat.gains: not JSON"):
        gains_from_tags({"compat.gains": "{not json", **old}, "v2")


def test_training_history_steps_epochs_and_reads_old_files(tmp_path):
    path = tmp_path / "train_metrics.json"
    rows = [
        {"epoch": 1, "loss": 2.0, "seconds": 1.0, "flag": True, "note": "x"},
        {"epoch": 2, "loss": 1.0, "seconds": 3.0, "loss_kd": None},
    ]
    path.write_text(json.dumps({"epochs": rows, "summary": {"loss": 1.0, "seconds_total": 4.0}}))
    points = training_history(path)
    assert [(k, v, s) for k, v, _, s in points] == [
        ("train/loss", 2.0, 1), ("train/seconds", 1.0, 1),
        ("train/loss", 1.0, 2), ("train/seconds", 3.0, 2),
        ("train/seconds_total", 4.0, 2),
    ]  # fmt: skip
    stamps = [t for k, _, t, _ in points if k == "train/loss"]
    assert stamps[1] - stamps[0] == 3000  # the second epoch took 3 s
    path.write_text(json.dumps({"loss": 0.5}))  # summary only: one point at step 0
    assert [(k, v, s) for k, v, _, s in training_history(path)] == [("train/loss", 0.5, 0)]
    path.write_text("{not json")
    assert training_history(path) == [] and training_history(tmp_path / "missing.json") == []


def test_evaluation_files_only_for_an_evaluated_version(tmp_path):
    plots, metrics = tmp_path / "plots", tmp_path / "metrics"
    (plots / "cmc").mkdir(parents=True)
    metrics.mkdir()
    for f in (
        plots / "cmc.png",
        plots / "heatmap_identification.png",
        plots / "cmc" / "v2_on_v1.json",
    ):
        f.write_text("x")
    (metrics / "compat.json").write_text(json.dumps({"cells": [["v1", "v1"], ["v2", "v1"]]}))
    (metrics / "identification.json").write_text("{}")
    got = evaluation_files("v2", plots, metrics)
    assert {k: [p.name for p in v] for k, v in got.items()} == {
        "metrics": ["compat.json", "identification.json"],
        "plots": ["cmc.png", "heatmap_identification.png"],
        "plots/cmc": ["v2_on_v1.json"],
    }
    assert evaluation_files("v9", plots, metrics) == {}
    assert evaluation_files("v2", plots, tmp_path / "nowhere") == {}
