"""``stages/upgrade.py`` on a tiny project: two untrained tiny versions, a folder source."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

from tests.conftest import tiny_folder_split

REPO = Path(__file__).resolve().parents[2]


def _stage():
    spec = importlib.util.spec_from_file_location("upgrade_stage", REPO / "stages" / "upgrade.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _project(root: Path, upgrade: dict) -> dict:
    """Images in a folder source, splits/v2.json, models/v1 (dim 6) and models/v2 (dim 8)."""
    import torch

    from compat.models.embedding import build_embedding_model
    from compat.models.version import save_version

    manifest = tiny_folder_split(root, 24, 4)
    cards = {}
    for seed, (version, parent, dim) in enumerate([("v1", None, 6), ("v2", "v1", 8)]):
        torch.manual_seed(seed)
        model = build_embedding_model("tiny", dim, in_channels=1, image_size=8)
        cards[version] = save_version(
            root / "models" / version,
            model,
            None,
            {
                "version": version,
                "backbone": "tiny",
                "dim": dim,
                "in_channels": 1,
                "image_size": 8,
                "pooling": "avg",
                "parent": parent,
                "split": "v2" if version == "v2" else "v1",
                "data_fingerprint": manifest.fingerprint if version == "v2" else "x" * 16,
            },
        )
    (root / "params.yaml").write_text(yaml.safe_dump({"upgrade": upgrade}))
    cards["manifest"] = manifest
    return cards


CFG = {"hidden": 16, "epochs": 2, "batch_size": 8, "device": "cpu", "val_fraction": 0.25}


def test_stage_fits_psi_and_writes_its_card(in_tmp, capsys):
    cards = _project(in_tmp, {"v2": CFG})
    assert _stage()(["v2", "--no-progress"]) == 0
    assert "upgrade: psi v1 -> v2 (6 -> 16 x 3 -> 8, mse) on 24 pairs" in capsys.readouterr().out
    folder = in_tmp / "models" / "v2" / "upgrade"
    card = json.loads((folder / "card.json").read_text())
    assert card["from"] == "v1" and card["to"] == "v2"  # from defaults to the card's parent
    assert card["from_weights_sha256"] == cards["v1"].weights_sha256
    assert card["to_weights_sha256"] == cards["v2"].weights_sha256
    assert card["data_fingerprint"] == cards["manifest"].fingerprint
    assert card["split"] == "v2" and card["num_pairs"] == 24 and card["config"]["from"] is None
    assert (card["in_dim"], card["out_dim"], card["hidden"], card["blocks"]) == (6, 8, 16, 3)
    metrics = json.loads((folder / "metrics.json").read_text())
    assert len(metrics["epochs"]) == 2 and metrics["summary"]["num_val"] == 6

    from compat.maps.psi import load_upgrade

    psi, _ = load_upgrade(folder)
    # Same seed, same data: the stage is reproducible byte for byte.
    first = card["weights_sha256"]
    assert _stage()(["v2", "--no-progress"]) == 0
    assert json.loads((folder / "card.json").read_text())["weights_sha256"] == first
    assert psi.in_dim == 6


def test_stage_errors(in_tmp, capsys):
    _project(in_tmp, {"v2": {**CFG, "from": "v0"}})
    assert _stage()(["v3"]) == 3
    assert "upgrade.v3: no upgrade module declared (declared: v2)" in capsys.readouterr().err
    assert _stage()(["v2"]) == 3  # models/v0 does not exist
    assert "v0" in capsys.readouterr().err
    (in_tmp / "params.yaml").write_text(yaml.safe_dump({"upgrade": {"v2": {"hiden": 4}}}))
    assert _stage()(["v2"]) == 4
    assert "upgrade.v2.hiden" in capsys.readouterr().err


def test_stage_refuses_a_split_changed_since_training(in_tmp, capsys):
    _project(in_tmp, {"v2": CFG})
    m = json.loads((in_tmp / "splits" / "v2.json").read_text())
    m["fingerprint"] = "0" * 16
    (in_tmp / "splits" / "v2.json").write_text(json.dumps(m))
    assert _stage()(["v2", "--no-progress"]) == 4
    assert "re-run train@v2" in capsys.readouterr().err
    assert not (in_tmp / "models" / "v2" / "upgrade" / "card.json").exists()
