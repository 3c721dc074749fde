"""experiments/sequence/epochs.py: the committed epoch measurement and how it is rendered."""

from __future__ import annotations

import json

import pytest
import yaml
from seq_scripts import EXPERIMENT, script


@pytest.fixture(scope="module")
def epochs():
    return script("epochs")


def test_committed_table_is_what_the_committed_numbers_give(epochs):
    results = json.loads((EXPERIMENT / "results" / "epochs.json").read_text(encoding="utf-8"))
    md = (EXPERIMENT / "results" / "epochs.md").read_text(encoding="utf-8")
    assert md == epochs.render(results), (
        "experiments/sequence/results/epochs.md differs from results/epochs.json: run "
        "python epochs.py --render there"
    )
    assert set(results["methods"]) >= {"hoc", "er"}


def test_the_chosen_count_was_measured(epochs):
    """The pipeline's epochs per task is one of the counts the measurement ran."""
    results = json.loads((EXPERIMENT / "results" / "epochs.json").read_text(encoding="utf-8"))
    train = yaml.safe_load((EXPERIMENT / "params.yaml").read_text(encoding="utf-8"))["train"]
    counts = {train[v]["epochs"] for v in train if "-t" in v}
    assert len(counts) == 1 and str(counts.pop()) in results["epochs"]


def test_render_lists_each_count_in_order(epochs):
    row = {
        "template": {"ac": 0.5, "aa": 0.8, "bc": 0.0, "fc": 0.0},
        "instance": {"ac": 0.25, "aa": 0.7, "bc": 0.0, "fc": 0.0},
        "train_seconds": 12.0,
        "steps": 7,
    }
    results = {
        "command": "python epochs.py --epochs 10 3",
        "commit": "abc1234",
        "machine": {"cpu": "cpu", "threads": 2},
        "minutes": 1.0,
        "methods": ["hoc"],
        "epochs": {"10": {"hoc": row}, "3": {"hoc": row}},
    }
    lines = epochs.render(results).splitlines()
    rows = [line for line in lines if line.startswith("| 3") or line.startswith("| 10")]
    assert rows == ["| 3 | 0.50 | 80.0 | 0.25 | 12 |", "| 10 | 0.50 | 80.0 | 0.25 | 12 |"]


def test_chains_are_each_methods_tasks_in_order(epochs):
    train = {"hoc-pre0": {}, "hoc-t10": {}, "hoc-t2": {}, "hoc-t1": {}, "er-t1": {}}
    assert epochs.chains(train, ["hoc", "er"]) == {
        "hoc": ["hoc-t1", "hoc-t2", "hoc-t10"],
        "er": ["er-t1"],
    }
    with pytest.raises(SystemExit, match="no bct-t<k> versions"):
        epochs.chains(train, ["bct"])
