"""``stages/upgrade.py`` refuses a psi that does not beat the old gallery left alone: it says
so, exits 0, writes the identity with a card whose ``refused`` names the numbers, and forward
evaluation then sees no upgrade (a tiny project: two tiny versions, a folder source)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from tests.conftest import tiny_folder_split

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _stage():
    spec = importlib.util.spec_from_file_location("upgrade_stage", REPO / "stages" / "upgrade.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _project(root: Path, upgrade: dict, same_weights: bool) -> None:
    """24 images of 8 classes, splits/v2.json, models/v1 and models/v2 (both dim 6): v2 is
    v1's weights again (``same_weights``: every new row equals its old row) or other ones."""

    from compat.models.embedding import build_embedding_model
    from compat.models.version import save_version

    manifest = tiny_folder_split(root, 48, 8)
    for version, parent in [("v1", None), ("v2", "v1")]:
        torch.manual_seed(0 if same_weights or version == "v1" else 1)
        model = build_embedding_model("tiny", 6, in_channels=1, image_size=8)
        save_version(
            root / "models" / version,
            model,
            None,
            {
                "version": version,
                "backbone": "tiny",
                "dim": 6,
                "in_channels": 1,
                "image_size": 8,
                "pooling": "avg",
                "parent": parent,
                "split": version,
                "data_fingerprint": manifest.fingerprint if version == "v2" else "x" * 16,
            },
        )
    (root / "params.yaml").write_text(yaml.safe_dump({"upgrade": upgrade}))


CFG = {"hidden": 16, "epochs": 4, "batch_size": 8, "device": "cpu", "val_fraction": 0.25}


def test_stage_refuses_a_psi_that_does_not_beat_no_upgrade(in_tmp, capsys):
    _project(in_tmp, {"v2": CFG}, same_weights=True)
    assert _stage()(["v2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "upgrade: psi v1 -> v2 (6 -> 16 x 3 -> 6, mse, residual) on 48 pairs" in out
    assert re.search(r"REFUSED: held-out top-1 (\S+) with psi against \1 without it", out)
    assert "lower bound +0.0000 is not above 0" in out
    assert "wrote the identity" in out
    folder = in_tmp / "models" / "v2" / "upgrade"
    card = json.loads((folder / "card.json").read_text())
    # Two paths to one discrete number: top-1 on the stored rows vs on F.normalize(psi(rows)) of
    # the identity psi (the same rows to an ulp). Exact because no held-out query's best and
    # second-best scores are within 1e-5 (4e-5 measured; 6-dim float32 rounding < 1e-6), so
    # no argmax flips; the "+0.0000" lower bound above rests on the same hits.
    assert (
        card["refused"]["metric"] == "top1"
        and card["refused"]["backward"] == card["refused"]["psi"]
    )
    assert card["residual"] is True and card["metrics"]["val_split"] == "classes"
    assert card["metrics"]["num_val"] == 12  # 2 of 8 classes held out

    from compat.maps.gallery import upgraded_embeddings
    from compat.models.card import read_upgrade_card

    assert read_upgrade_card(folder).is_refused
    rows = np.random.default_rng(1).standard_normal((9, 6)).astype(np.float32)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    upgraded, info = upgraded_embeddings({"v2": folder}, {"v1": rows})
    np.testing.assert_allclose(upgraded["v2"][1], rows, atol=1e-6)  # forward == backward
    assert "no upgrade" in info["v2"]["refused"]
    # The refused card and its identity weights are reproducible byte for byte.
    first = (folder / "weights.safetensors").read_bytes()
    assert _stage()(["v2", "--no-progress"]) == 0
    assert (folder / "weights.safetensors").read_bytes() == first


def test_stage_with_refuse_off_keeps_the_fit(in_tmp, capsys):
    _project(in_tmp, {"v2": {**CFG, "refuse": False}}, same_weights=True)
    assert _stage()(["v2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "REFUSED" not in out and "best held-out epoch" in out
    card = json.loads((in_tmp / "models" / "v2" / "upgrade" / "card.json").read_text())
    assert "refused" not in card


def test_stage_reports_the_held_out_top1_of_a_kept_psi(in_tmp, capsys):
    _project(in_tmp, {"v2": CFG}, same_weights=False)
    assert _stage()(["v2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    card = json.loads((in_tmp / "models" / "v2" / "upgrade" / "card.json").read_text())
    m = card["metrics"]
    if "refused" in card:  # either way, the stage says which and why
        assert "REFUSED" in out and m["val_top1"] <= m["val_top1_without_upgrade"]
    else:
        assert f"top-1 {m['val_top1']:.3f} (without psi {m['val_top1_without_upgrade']:.3f})" in out
        assert m["val_top1"] > m["val_top1_without_upgrade"]


def _validation(root: Path, manifest) -> None:
    """splits/validation.json over the tiny source's items (item k is of class k % 8): each
    class's items of even k // 8 as queries, the others as its gallery (the stage reads it as
    the held-out set psi is judged on)."""
    from compat.data.split import EvalManifest
    from compat.io import fingerprint, write_json

    body = {"source_fingerprint": manifest.source_fingerprint, "items": manifest.items,
            "labels": manifest.labels, "query": [k for k in range(48) if k // 8 % 2 == 0],
            "gallery": [k for k in range(48) if k // 8 % 2], "nonmated_classes": [],
            "pairs": []}  # fmt: skip
    write_json(root / "splits" / "validation.json",
               EvalManifest(**body, fingerprint=fingerprint(body)).model_dump())  # fmt: skip


def test_stage_judges_a_kept_psi_on_the_validation_split_as_the_gate_does(in_tmp, capsys):
    """Issue 42: with splits/validation.json, a psi its own check kept is judged there against
    M(old, old): the card records the numbers, and the line says which way it went."""
    _project(in_tmp, {"v2": {**CFG, "refuse": False}}, same_weights=False)
    import json as _json

    split = _json.loads((in_tmp / "splits" / "v2.json").read_text())
    from compat.data.split import TrainManifest

    _validation(in_tmp, TrainManifest(**split))
    assert _stage()(["v2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    card = json.loads((in_tmp / "models" / "v2" / "upgrade" / "card.json").read_text())
    v = card["metrics"]["verdict"]
    assert v["set"] == "split:validation" and v["queries"] == 24 and v["metric"] == "top1"
    assert v["difference"] == pytest.approx(v["served"] - v["old_self"])
    assert f"on split:validation as the gate judges: {v['served']:.4f} served" in out
    assert "refused" not in card  # refuse: false records the verdict, keeps the fit
    # Without the file (or with --check-split elsewhere), no verdict: the held-out check alone.
    assert _stage()(["v2", "--no-progress", "--check-split", "nothing.json"]) == 0
    card = json.loads((in_tmp / "models" / "v2" / "upgrade" / "card.json").read_text())
    assert "verdict" not in card["metrics"]


def test_stage_refuses_a_psi_that_loses_to_the_old_model_on_the_validation_split(
    in_tmp, capsys, monkeypatch
):
    """The verdict's refusal through the stage: REFUSED with the verdict's reason, exit 0, the
    identity saved and the card's refused set, its numbers in metrics.verdict. The verdict
    itself (M(new, psi(old)) against M(old, old)) is tests/maps/test_psi_verdict.py's; here it
    is made to fail, whatever the tiny models score."""
    from compat.maps import verdict
    from compat.maps.card import MapRefusal, SetCheck

    _project(in_tmp, {"v2": {**CFG, "refuse": False}}, same_weights=False)
    from compat.data.split import TrainManifest

    _validation(in_tmp, TrainManifest(**json.loads((in_tmp / "splits" / "v2.json").read_text())))
    cfg = {**CFG, "refuse": True}
    (in_tmp / "params.yaml").write_text(yaml.safe_dump({"upgrade": {"v2": cfg}}))
    held = SetCheck(set="split:validation", metric="top1", queries=24, served=0.25, old_self=0.5,
                    difference=-0.25, lower_bound=-0.4, confidence=0.95, min_gain=0.0,
                    resamples=10)  # fmt: skip
    refusal = MapRefusal(reason="on split:validation (...), as the gate judges: lost", mapped=0.25)
    monkeypatch.setattr(verdict, "check_psi", lambda *a, **k: (held, refusal))
    # The held-out check passes whatever the tiny models score (its own refusal is tested
    # above), so the verdict is the one that refuses.
    from compat.maps import psi_fit

    fit = psi_fit.fit_upgrade
    monkeypatch.setattr(psi_fit, "fit_upgrade", lambda o, n, c, **k: fit(o, n, c.model_copy(update={"refuse": False}), **k))  # fmt: skip
    assert _stage()(["v2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    card = json.loads((in_tmp / "models" / "v2" / "upgrade" / "card.json").read_text())
    assert (
        "REFUSED: on split:validation (...), as the gate judges: lost; psi is the identity" in out
    )
    assert card["refused"]["psi"] == 0.25 and card["metrics"]["verdict"]["lower_bound"] == -0.4
    from compat.models.card import read_upgrade_card

    assert read_upgrade_card(in_tmp / "models" / "v2" / "upgrade").is_refused


def test_a_validation_split_of_another_source_is_exit_4_before_any_fit(in_tmp, capsys):
    _project(in_tmp, {"v2": CFG}, same_weights=False)
    from compat.data.split import TrainManifest

    split = TrainManifest(**json.loads((in_tmp / "splits" / "v2.json").read_text()))
    _validation(in_tmp, split.model_copy(update={"source_fingerprint": "0" * 16}))
    assert _stage()(["v2", "--no-progress"]) == 4
    err = capsys.readouterr().err
    assert "splits/validation.json: made from source 0000000000000000" in err
    assert not (in_tmp / "models" / "v2" / "upgrade" / "card.json").exists()
