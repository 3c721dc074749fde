"""Choosing a method's weight on the validation set by the gate's lower bound (the smallest
over the checks), from ``dvc exp show --csv`` output."""

from __future__ import annotations

import pytest

from compat.errors import BadInputError, NotFoundError
from compat.evaluate.pick import (
    Candidate,
    candidates_from_csv,
    format_pick,
    lower_bound_key,
    main,
    pick,
)

TOP1 = lower_bound_key("identification", "top1", "v2", "v1")
MAP = lower_bound_key("identification", "mAP", "v2", "v1")
LAM = "train.v2.method_params.lam"

# As `dvc exp show --csv` writes it: the workspace and baseline rows, then named experiments;
# `!` where a metric is missing. The mAP column carries a file prefix (a name clash).
CSV = (
    f"Experiment,rev,typ,Created,parent,{TOP1},metrics/validation/compat.json:{MAP},{LAM}\n"
    ",workspace,baseline,,,0.02,0.01,3\n"
    ",main,baseline,2026-12-01T08:00:00,,!,!,1.0\n"
    "lam-0.3,aaa,branch_commit,2026-12-01T08:10:00,,-0.010,0.020,0.3\n"
    "lam-1,bbb,branch_commit,2026-12-01T08:20:00,,0.030,0.015,1\n"
    "lam-3,ccc,branch_base,2026-12-01T08:30:00,,0.050,0.010,3\n"
    "lam-10,ddd,branch_base,2026-12-01T08:40:00,,!,0.090,10\n"
)


def test_the_pick_is_the_largest_smallest_lower_bound():
    found = candidates_from_csv(CSV, LAM, "v2", "v1")
    assert [c.name for c in found] == ["lam-0.3", "lam-1", "lam-3", "lam-10"]  # experiments only
    # Scores (smallest lower bound): 0.3 -> -0.010, 1 -> 0.015, 3 -> 0.010, 10 -> n/a (missing).
    assert [c.score for c in found] == [-0.010, 0.015, 0.010, None]
    result = pick(found)
    assert result.best.name == "lam-1" and result.best.value == "1"
    text = format_pick(result, LAM)
    assert "| lam-1 (picked) | 1 | +0.0300 | +0.0150 |" in text
    assert "| lam-10 | 10 | n/a | +0.0900 |" in text
    assert "picked lam-1: train.v2.method_params.lam=1, smallest lower bound +0.0150" in text
    assert "dvc exp apply lam-1 && dvc repro evaluate" in text


def test_one_check_ties_go_to_the_first_and_nothing_scored_is_bad_input():
    found = candidates_from_csv(CSV, LAM, "v2", "v1", checks=[("identification", "top1")])
    assert pick(found).best.name == "lam-3"  # 0.050 on top-1 alone
    tie = [Candidate("a", "1", {"x": 0.2}), Candidate("b", "2", {"x": 0.2})]
    assert pick(tie).best.name == "a"
    with pytest.raises(BadInputError, match="no candidate"):
        pick([Candidate("a", "1", {"x": None})])


def test_without_experiments_the_committed_revisions_are_the_candidates():
    text = f"Experiment,rev,typ,{TOP1},{MAP},{LAM}\n,workspace,baseline,0.9,0.9,1\n,main,baseline,0.1,0.2,1\n"
    found = candidates_from_csv(text, LAM, "v2", "v1")
    assert [(c.name, c.score) for c in found] == [("main", 0.1)]


def test_a_missing_column_names_it():
    with pytest.raises(NotFoundError, match=r"no column 'difference\.identification\.top1\.v3"):
        candidates_from_csv(CSV, LAM, "v3", "v1")
    with pytest.raises(NotFoundError, match=r"no column 'train\.v2\.lr'"):
        candidates_from_csv(CSV, "train.v2.lr", "v2", "v1")


def test_main_prints_the_pick_and_exits_by_the_documented_codes(tmp_path, capsys):
    (tmp_path / "sweep.csv").write_text(CSV)
    args = ["--param", LAM, "--version", "v2", "--parent", "v1"]
    assert main([str(tmp_path / "sweep.csv"), *args]) == 0
    assert "picked lam-1" in capsys.readouterr().out
    assert main([str(tmp_path / "nowhere.csv"), *args]) == 3
    assert "nowhere.csv: file not found" in capsys.readouterr().err
    (tmp_path / "bad.csv").write_text(
        CSV.replace("0.020", "!").replace("0.015", "!").replace("0.010", "!").replace("0.090", "!")
    )
    assert main([str(tmp_path / "bad.csv"), *args]) == 4
    assert (
        capsys.readouterr().err.strip()
        == "error: pick: no candidate has a lower bound for every check"
    )
    assert main([str(tmp_path / "sweep.csv"), *args, "--check", "top1"]) == 4


def test_the_evaluate_stage_reads_the_manifest_it_is_given(in_tmp, capsys):
    """The sweep's validate stage is the evaluate stage on splits/validation.json."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("evaluate_stage", repo / "stages" / "evaluate.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    (in_tmp / "params.yaml").write_text("evaluate:\n  chain: [v1, v2]\n")
    (in_tmp / "splits").mkdir()
    (in_tmp / "splits" / "eval.json").write_text("{}")  # present, but not the one asked for
    assert stage.main(["--manifest", "splits/validation.json"]) == 3
    assert "splits/validation.json: manifest not found" in capsys.readouterr().err
