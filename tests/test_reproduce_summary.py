"""benchmarks/reproduce.py's rows over seeds: means and spreads, the per-seed rules, the verdict
(held only if held on every seed), on a hand-made file; and the committed reproduction.json's
rows and reproduction.md are what its per-seed numbers give."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str, rel: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / rel)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


rp = _load("reproduce", "benchmarks/reproduce.py")


def _diff(value: float, lower: float) -> dict:
    return {"value": value, "interval": [lower - 0.1, 2 * value - lower], "lower_bound": lower}


def _run(seed: int, **over) -> dict:
    """One seed: every cell 50 / 30, every difference +1 (lower bound +0.5), every gain 20%;
    ``over`` replaces cells ("q/g": (top1, mAP)), differences ("a - b": ((v, lb), (v, lb)))
    and gains ("gain:name": top-1 value)."""
    cells = {"old/old": {"top1": 50.0, "mAP": 30.0}}
    for name in rp.RUNS:
        if name != "old":
            cells[f"{name}/old"] = {"top1": 50.0, "mAP": 30.0}
            cells[f"{name}/{name}"] = {"top1": 50.0, "mAP": 30.0}
    diffs = {d: {m: _diff(1.0, 0.5) for m in rp.METRICS} for d in rp.differences()}
    gains = {
        n: {m: {"value": 20.0, "interval": [15.0, 25.0], "meaningful": True, "reason": "criterion holds"} for m in rp.METRICS}
        for n in rp.PARAGON
    }  # fmt: skip
    for key, value in over.items():
        if key.startswith("gain:"):
            gains[key[5:]]["top1"]["value"] = value
        elif " - " in key:
            diffs[key] = {m: _diff(*v) for m, v in zip(rp.METRICS, value, strict=True)}
        else:
            cells[key] = dict(zip(rp.METRICS, value, strict=True))
    return {
        "seed": seed,
        "version_seeds": rp.version_seeds(seed),
        "epochs": 6,
        "confidence": 0.95,
        "cells": cells,
        "differences": diffs,
        "gains": gains,
        "seconds": {"total": 60.0 * (seed + 1)},
    }


CHAIN = {
    "top1": {"v1": {"v1": 0.5}, "v3": {"v1": 0.6}},
    "mAP": {"v1": {"v1": 0.3}, "v3": {"v1": 0.4}},
}


def _doc() -> dict:
    """Three seeds. Result 1: cross near chance (0.5%) and criterion failing on every seed.
    Result 3: criterion's lower bound -0.2 on seed 2 (fails there). Result 4: sys gains 28, 30,
    34% against basic's 20, 16, 20 (+8 to +14 points) and holds; kd's paired difference over
    basic has lower bound -0.3 on seed 1. Result 6 holds on every seed."""
    common = {
        "independent/old": (0.6, 1.0),
        "independent/old - old/old": ((-49.0, -50.0), (-29.0, -30.0)),
        "independent/independent - bct-basic/bct-basic": ((3.0, 2.0), (2.0, 1.0)),
        "gain:bct-basic": 20.0,
        "gain:bct-sys": 28.0,
    }
    s0 = _run(0, **(common | {"bct-basic/old": (54.9, 35.0), "bct-basic/old - old/old": ((4.0, 3.1), (3.0, 2.0))}))  # fmt: skip
    s1 = _run(
        1,
        **common
        | {
            "bct-basic/old": (56.4, 36.0),
            "bct-basic/old - old/old": ((5.0, 4.0), (3.0, 2.0)),
            "bct-kd/old - bct-basic/old": ((0.5, -0.3), (0.2, -0.5)),
            "gain:bct-basic": 16.0,
            "gain:bct-sys": 30.0,
            "independent/old": (0.7, 1.1),
        },
    )
    s2 = _run(
        2,
        **common
        | {
            "bct-basic/old": (57.0, 37.0),
            "bct-basic/old - old/old": ((1.0, -0.2), (0.5, -0.4)),
            "gain:bct-sys": 34.0,
            "independent/old": (0.8, 1.2),
        },
    )
    return {
        "format": rp.FORMAT,
        "setting": {
            "classes": 60,
            "eval_classes": 20,
            "images_per_class": 20,
            "old_fraction": 0.3,
            "init": "scratch",
            "epochs": 6,
            "seeds": [0, 1, 2],
            "seed_rule": rp.SEED_RULE,
            "resamples": 1000,
            "confidence": 0.95,
            "units": "percent",
        },
        "chance": 0.5,
        "params": {},
        "runs": [s0, s1, s2],
        "chain": CHAIN,
        "log": {
            "command": "python benchmarks/reproduce.py --seeds 3",
            "commit": "abc1234",
            "uncommitted_changes": False,
            "started": "2025-01-01T00:00:00+00:00",
            "machine": {"cpu": "Test CPU", "cpu_count": 2, "torch": "2.0", "threads": 2},
            "seconds": {"total": 360.0},
        },
    }


def _rows(doc: dict) -> dict[str, dict]:
    return {r["result"].split()[0]: r for r in rp.summarize(doc)}


def test_spread_span_and_verdict():
    assert rp.spread([54.9, 56.4, 57.0]) == "56.1 [54.9, 57.0]"  # mean 168.3 / 3 = 56.1
    assert rp.spread([56.14]) == "56.1"
    assert rp.spread([1.0, 1.04]) == "1.0 [1.0, 1.0]"  # equal at this precision: still a spread
    assert rp.spread([16.0, 20.0, 20.0], 0) == "19 [16, 20]"  # mean 18.67
    assert rp.span([3.1, 4.0, 3.5]) == "+3.1 to +4.0"
    assert rp.span([-0.2, 4.0]) == "-0.2 to +4.0"
    assert rp.span([2.0, 2.0]) == "+2.0"
    assert rp.span([None]) == "n/a"
    assert rp.verdict([True, True, True]) == "held (3 seeds)"
    assert rp.verdict([True, False, True]) == "did not hold (held on 2/3 seeds)"
    assert rp.verdict([True]) == "held (1 seed)"


def test_version_seeds_shift_every_version_including_the_old_model():
    assert rp.version_seeds(0) == {name: k for k, name in enumerate(rp.RUNS, start=1)}
    assert rp.version_seeds(2)["old"] == 201 and rp.version_seeds(2)["unibct-refined"] == 209
    assert len({s for k in range(3) for s in rp.version_seeds(k).values()}) == 27


def test_result_1_holds_near_chance_with_the_criterion_failing_on_every_seed():
    r = _rows(_doc())["1"]
    assert r["per_seed"] == [True, True, True] and r["held"] is True
    assert r["verdict"] == "held (3 seeds)"
    # cross top-1 0.6, 0.7, 0.8 -> mean 0.7; mAP 1.0, 1.1, 1.2 -> 1.1; 5x chance = 2.5
    assert r["measured"].startswith("cross 0.7 [0.6, 0.8] / 1.1 [1.0, 1.2] (chance 0.5")
    assert "below 5x on 3/3 seeds" in r["measured"]
    assert "criterion fails on 3/3 seeds (lower bound of M(new, old) - M(old, old), top-1 -50.0)" in r["measured"]  # fmt: skip


def test_a_seed_that_fails_makes_result_3_fail_and_says_by_how_much():
    r = _rows(_doc())["3"]
    assert r["per_seed"] == [True, True, False] and r["held"] is False
    assert r["verdict"] == "did not hold (held on 2/3 seeds)"
    m = r["measured"]
    assert m.startswith("cross 56.1 [54.9, 57.0] / 36.0 [35.0, 37.0];")
    assert "criterion holds on 2/3 seeds" in m
    assert "top-1 -0.2 to +4.0, mAP -0.4 to +2.0" in m  # the per-seed lower bounds
    assert "gain 19 [16, 20]%" in m  # 20, 16, 20
    assert "(paragon - self +3.0)" in m


def test_result_3_holds_when_every_seed_does():
    doc = _doc()
    doc["runs"][2]["differences"]["bct-basic/old - old/old"] = {
        m: _diff(1.0, 0.3) for m in rp.METRICS
    }
    r = _rows(doc)["3"]
    assert r["held"] is True and r["verdict"] == "held (3 seeds)"
    assert "lower bound of M(new, old) - M(old, old) top-1 +0.3 to +4.0" in r["measured"]
    # the gain must be above 10% on every seed
    doc["runs"][1]["gains"]["bct-basic"]["top1"]["value"] = 9.0
    assert _rows(doc)["3"]["per_seed"] == [True, False, True]


def test_result_4_is_partly_when_only_one_variant_holds_on_every_seed():
    r = _rows(_doc())["4"]
    assert r["per_seed"] == [True, False, True] and r["held"] is False and r["partly"] is True
    assert r["verdict"] == "partly (sys held on 3/3 seeds, kd held on 2/3 seeds)"
    # sys gain 28 - 20, 30 - 16, 34 - 20 points: +8 to +14
    assert (
        "sys cross 50.0 [50.0, 50.0] / 30.0 [30.0, 30.0], gain 31 [28, 34]%, +8 to +14 points over basic's"
        in r["measured"]
    )
    assert "M(bct-kd, old) - M(bct-basic, old) top-1 lower bound -0.3 to +0.5" in r["measured"]
    doc = _doc()
    doc["runs"][1]["differences"]["bct-kd/old - bct-basic/old"] = {
        m: _diff(1.0, 0.5) for m in rp.METRICS
    }
    r = _rows(doc)["4"]
    assert r["held"] is True and r["verdict"] == "held (3 seeds)" and "partly" not in r


def test_result_6_needs_the_paired_lower_bound_on_every_seed():
    doc = _doc()
    r = _rows(doc)["6"]
    assert r["held"] is True and r["verdict"] == "held (3 seeds)"
    assert "refined - vanilla top-1 +1.0 (lower bound +0.5), mAP +1.0" in r["measured"]
    # a point difference above 0 whose lower bound is not: fails on that seed
    ref = "unibct-refined/old - unibct-vanilla/old"
    doc["runs"][0]["differences"][ref]["mAP"] = _diff(0.6, -0.1)
    r = _rows(doc)["6"]
    assert r["per_seed"] == [False, True, True]
    assert r["verdict"] == "did not hold (held on 2/3 seeds)"
    assert "above 0 on 3/3 seeds" in r["measured"]


def test_result_2_and_the_chain_row():
    doc = _doc()
    rows = _rows(doc)
    assert rows["2"]["held"] is True
    assert "criterion passes on 3/3 seeds" in rows["2"]["measured"]
    assert rows["5"]["held"] is True and rows["5"]["verdict"] == "held"
    doc["chain"] = None
    assert _rows(doc)["5"]["verdict"] == "not measured"


def test_render_and_the_readme_block_come_from_the_per_seed_numbers(tmp_path):
    doc = _doc()
    md = rp.render(doc)
    assert "mean [min, max] over 3 seeds" in md
    assert "| bct-basic | 4, 104, 204 | 56.1 [54.9, 57.0] | 36.0 [35.0, 37.0] | 50.0 [50.0, 50.0] | 30.0 [30.0, 30.0] |" in md  # fmt: skip
    assert "| bct-basic/old - old/old | top1 | +4.0 [+3.0, +4.9], +3.1 | +5.0 [+3.9, +6.0], +4.0 | +1.0 [-0.3, +2.2], -0.2 |" in md  # fmt: skip
    assert "seeds 0, 1, 2 (seed s trains the k-th version" in md
    assert "per seed 1.0, 2.0, 3.0 min." in md and "6.0 min in all" in md
    doc["runs"][1]["reused"] = ["old", "l2"]
    assert "per seed 1.0, 2.0, 3.0 min (2 of the 27 versions were kept" in rp.render(doc)
    doc["runs"][1]["reused"] = []
    path = tmp_path / "reproduction.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    numbers = _load("readme_numbers", "scripts/readme_numbers.py")
    block = numbers.reproduction(path)
    lines = block.splitlines()
    assert "1-4 and 6: mean [min, max] over 3 seeds" in lines[0]
    by = {line.split(" | ")[0].lstrip("| ").split()[0]: line for line in lines[2:10]}
    assert sorted(by) == list("12345678")
    assert by["3"].endswith("| did not hold (held on 2/3 seeds) |")
    assert by["4"].endswith("| partly (sys held on 3/3 seeds, kd held on 2/3 seeds) |")
    assert "Results 1-4 and 6 (`benchmarks/results/reproduction.json`" in block
    assert "init: scratch" in block and "20 held out" in block
    # the wrapped note never starts a line with what markdown reads as a list item
    assert not [line for line in lines if line[:2] in ("+ ", "- ", "* ")]


def test_the_committed_rows_and_table_are_what_the_per_seed_numbers_give():
    path = ROOT / "benchmarks" / "results" / "reproduction.json"
    doc = json.loads(path.read_text(encoding="utf-8"))
    if "runs" not in doc:
        pytest.skip("the committed reproduction.json is a single run of before the seeds: "
                    "re-run python benchmarks/reproduce.py")  # fmt: skip
    assert doc["rows"] == json.loads(json.dumps(rp.summarize(copy.deepcopy(doc))))
    md = (ROOT / "benchmarks" / "results" / "reproduction.md").read_text(encoding="utf-8")
    assert md == rp.render(doc) + "\n"
