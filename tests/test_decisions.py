"""scripts/decisions.py's count of where a map's own check and the gate disagree (issue 42 item
3), on a hand-made pipeline folder whose every outcome is known."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("decisions", ROOT / "scripts" / "decisions.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["decisions"] = module
    spec.loader.exec_module(module)
    return module


def _cell(new: str, diff: float, hi: float, passes: bool, forward_hi: float | None = None):
    top1 = {"adapted_minus_old": {"value": diff, "lower_bound": diff - 0.01,
                                  "interval": [diff - 0.01, hi]}, "passes": passes}  # fmt: skip
    if forward_hi is not None:
        top1["forward"] = 0.5
        top1["forward_minus_old"] = {"value": forward_hi - 0.01, "interval": [-1.0, forward_hi]}
    return {"new": new, "metrics": {"identification": {"top1": top1}}}


def test_disagreements_are_counted_per_kind(tmp_path, monkeypatch):
    d = _script()
    folder = tmp_path / "m"
    folder.mkdir()
    cells = {
        "a-keep-win": _cell("a", 0.05, 0.07, True, forward_hi=-0.02),  # a's psi kept, losing
        "a-keep-fail": _cell("a", 0.0, 0.01, False),  # kept, does not pass, not beyond interval
        "b-keep-lose": _cell("b", -0.05, -0.02, False, forward_hi=0.03),  # b's psi not losing
        "b-refused-pass": _cell("b", 0.04, 0.06, True),
        "b-refused-fail": _cell("b", -0.04, -0.01, False),
    }
    fits = {
        n: {"refused": "x" if "refused" in n else None, "verdict": {"on": "validation"}}
        for n in cells
    }
    forward = {"forward": {"a": {"psi": {"refused": None}}, "b": {"psi": {"refused": None}}}}
    for name, data in (("adapted", cells), ("adapters", fits), ("compat", forward)):
        (folder / f"{name}.json").write_text(json.dumps(data), encoding="utf-8")
    monkeypatch.setattr(d, "ROOT", tmp_path)
    a = d.verdict_agreement("m")
    assert a["maps"] == 5 and a["decided_on"] == ["validation classes"]
    assert a["kept_failing"] == ["a-keep-fail", "b-keep-lose"]
    assert a["kept_losing"] == ["b-keep-lose"]
    assert a["refused_passing"] == ["b-refused-pass"]
    assert a["psi"] == ["a", "b"] and a["psi_kept_losing"] == ["a"]


def test_a_refused_psi_and_a_pipeline_without_maps(tmp_path, monkeypatch):
    d = _script()
    folder = tmp_path / "m"
    folder.mkdir()
    cells = {"a-map": _cell("a", 0.05, 0.07, True, forward_hi=-0.02)}
    (folder / "adapted.json").write_text(json.dumps(cells), encoding="utf-8")
    (folder / "adapters.json").write_text(json.dumps({"a-map": {"refused": None}}), "utf-8")
    psi = {"forward": {"a": {"psi": {"refused": "no gain on held-out classes"}}}}
    (folder / "compat.json").write_text(json.dumps(psi), encoding="utf-8")
    monkeypatch.setattr(d, "ROOT", tmp_path)
    a = d.verdict_agreement("m")
    assert a["psi"] == ["a"] and a["psi_kept_losing"] == []  # refused: never served
    assert a["decided_on"] == ["held-out training classes"]
    assert d.verdict_agreement("nothing-here") is None
