"""``stages/adapt.py`` on a tiny project (two tiny versions, a folder source): every map of
params.yaml ``adapt`` fitted on the new version's training split through the embedding cache,
written to ``maps/<name>/`` with ``metrics/adapters.json``; a refused map still written with
exit 0; bad params exit 4 with one line naming params.yaml and the field."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

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
    spec = importlib.util.spec_from_file_location("adapt_stage", REPO / "stages" / "adapt.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.main


def _project(root: Path, adapt: dict, same_weights: bool = False) -> None:
    """48 images of 8 classes, splits/v2.json, models/v1 and models/v2 (both dim 6; v2 is v1's
    weights again with ``same_weights``), params.yaml with ``adapt``."""

    from compat.models.embedding import build_embedding_model
    from compat.models.version import save_version

    manifest = tiny_folder_split(root, 48, 8)
    for version in ("v1", "v2"):
        torch.manual_seed(0 if same_weights or version == "v1" else 1)
        model = build_embedding_model("tiny", 6, in_channels=1, image_size=8)
        save_version(
            root / "models" / version,
            model,
            None,
            {
                "version": version, "backbone": "tiny", "dim": 6, "in_channels": 1,
                "image_size": 8, "pooling": "avg", "parent": None, "split": version,
                "data_fingerprint": manifest.fingerprint if version == "v2" else "x" * 16,
            },
        )  # fmt: skip
    (root / "params.yaml").write_text(yaml.safe_dump({"adapt": adapt}))


MAPS = {
    "v2-to-v1": {"new": "v2", "old": "v1", "kind": "procrustes", "resamples": 200},
    "v2-to-v1-mlp": {
        "new": "v2", "old": "v1", "kind": "residual-mlp", "resamples": 200,
        "params": {"residual": False, "loss": "cosine", "hidden": 8, "blocks": 1, "epochs": 2,
                   "batch_size": 8, "device": "cpu"},
    },
}  # fmt: skip


def test_stage_fits_every_map_through_the_cache_and_writes_the_metrics(in_tmp, capsys):
    from compat.maps import load_map

    _project(in_tmp, MAPS)
    assert _stage()(["--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[1].strip() for line in out] == ["v2-to-v1", "v2-to-v1-mlp"]
    assert out[0].startswith("adapt: v2-to-v1: procrustes v2 -> v1 on ") and "split v2" in out[0]
    metrics = json.loads((in_tmp / "metrics" / "adapters.json").read_text())
    assert set(metrics) == set(MAPS)
    for name, entry in metrics.items():
        fitted = load_map(in_tmp / "maps" / name)  # sha256 checked
        card = fitted.card
        assert (card.kind, card.role, card.from_, card.to) == (MAPS[name]["kind"], "query-adapter", "v2", "v1")  # fmt: skip
        assert card.data.source["version"] == "v2" and card.data.source["items"] == "split:v2"
        assert entry["kind"] == card.kind and entry["split"] == "v2" and entry["pairs"] == 48
        assert entry["fit_pairs"] + entry["heldout_pairs"] == 48
        assert entry["heldout"]["top1"] == card.heldout.mapped
        assert entry["refused"] is (card.refused is not None)
        assert entry["apply_rows"] == 48 and entry["apply_us_per_query"] > 0  # no eval set here
        verdict = "REFUSED" if entry["refused"] else "kept"
        assert f": {verdict}" in next(line for line in out if f" {name}: " in line)
    assert card.params["residual"] is False and card.params["hidden"] == 8
    # Both versions' rows of the split are in the embedding cache: a second run embeds nothing.
    entries = sorted(p.name for p in (in_tmp / "cache" / "embeddings").glob("*.npz"))
    assert len(entries) == 2
    assert _stage()(["v2-to-v1", "--no-progress"]) == 0
    assert sorted(p.name for p in (in_tmp / "cache" / "embeddings").glob("*.npz")) == entries
    again = json.loads((in_tmp / "metrics" / "adapters.json").read_text())
    assert set(again) == set(MAPS) and again["v2-to-v1-mlp"] == metrics["v2-to-v1-mlp"]


def test_a_refused_map_is_written_and_the_stage_exits_0(in_tmp, capsys):
    """v2 = v1's weights: the Procrustes map is the identity and cannot beat the raw rows."""
    from compat.maps import load_map

    _project(in_tmp, {"v2-to-v1": MAPS["v2-to-v1"]}, same_weights=True)
    assert _stage()(["--no-progress"]) == 0
    line = capsys.readouterr().out.strip()
    fitted = load_map(in_tmp / "maps" / "v2-to-v1")
    h = fitted.card.heldout
    assert fitted.refused is not None and h.mapped == h.baseline
    # 12 held-out queries: the raw rows may count as near chance (then the baseline is old-self)
    assert f"held-out top-1 {h.mapped:.4f} with the map, {h.baseline:.4f} {h.baseline_kind}" in line
    assert ": REFUSED: held-out top-1" in line and "wrote maps/v2-to-v1" in line
    assert json.loads((in_tmp / "metrics" / "adapters.json").read_text())["v2-to-v1"]["refused"]


@pytest.mark.parametrize(
    ("entry", "field", "words"),
    [
        ({"../x": MAPS["v2-to-v1"]}, "adapt.../x", "name '../x'"),
        ({"m": {**MAPS["v2-to-v1"], "kind": "rotation"}}, "adapt.m.kind", "'procrustes'"),
        ({"m": {**MAPS["v2-to-v1"], "epochs": 3}}, "adapt.m.epochs", "Extra inputs"),
        ({"m": {**MAPS["v2-to-v1"], "params": {"rigde": 1}}}, "adapt.m.params", "rigde: unknown"),
        ({"m": {**MAPS["v2-to-v1"], "old": "v2"}}, "adapt.m", "a map joins two versions"),
        ({"m": {**MAPS["v2-to-v1"], "new": "v2/../x"}}, "adapt.m.new", "name 'v2/../x'"),
    ],
)
def test_bad_params_exit_4_with_one_line(in_tmp, capsys, entry, field, words):
    (in_tmp / "params.yaml").write_text(yaml.safe_dump({"adapt": entry}))
    assert _stage()([]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: params.yaml: {field}: ")
    assert words in err


def test_unknown_map_or_missing_version_is_not_found(in_tmp, capsys):
    (in_tmp / "params.yaml").write_text(yaml.safe_dump({"adapt": {"m": MAPS["v2-to-v1"]}}))
    assert _stage()(["nope"]) == 3
    assert "params.yaml: adapt.nope: no such map (declared: m)" in capsys.readouterr().err
    assert _stage()([]) == 3  # models/v2 does not exist
    assert "models/v2" in capsys.readouterr().err


def _validation(root: Path, manifest) -> None:
    """splits/validation.json over the items of the tiny split (a wiring check: the stage reads
    it as the evaluation set is read, query and gallery items of each class)."""
    from compat.data.split import EvalManifest
    from compat.io import fingerprint, write_json

    seen: dict[str, int] = {}
    query, gallery = [], []
    for k, lab in enumerate(manifest.labels):
        seen[lab] = seen.get(lab, 0) + 1
        (query if seen[lab] % 2 else gallery).append(k)
    body = {"source_fingerprint": manifest.source_fingerprint, "items": manifest.items,
            "labels": manifest.labels, "query": query, "gallery": gallery,
            "nonmated_classes": [], "pairs": []}  # fmt: skip
    write_json(root / "splits" / "validation.json",
               EvalManifest(**body, fingerprint=fingerprint(body)).model_dump())  # fmt: skip


def test_with_a_validation_split_every_map_is_checked_there_as_the_gate_judges(in_tmp, capsys):
    """Issue 42 items 1 and 3: a blend entry is a query blend (its weight on its card), and with
    splits/validation.json each map is checked there (the set's numbers decide and are in the
    card, adapters.json and the summary line); both versions embed the set through the cache."""
    from compat.data.split import load_train_manifest
    from compat.maps import load_map

    maps = {"v2-to-v1": MAPS["v2-to-v1"],
            "v2-to-v1-blend": {**MAPS["v2-to-v1"], "blend": "slerp"}}  # fmt: skip
    _project(in_tmp, maps)
    _validation(in_tmp, load_train_manifest(in_tmp / "splits" / "v2.json"))
    assert _stage()(["--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    metrics = json.loads((in_tmp / "metrics" / "adapters.json").read_text())
    for name, line in zip(maps, out, strict=True):
        card = load_map(in_tmp / "maps" / name).card
        v = card.verdict
        assert v is not None and v.set.startswith("split:validation")
        # a blend selects its weight on half the set's classes, and is checked on the other
        assert v.queries == (24 if card.blend is None else 12)
        assert metrics[name]["verdict"] == v.model_dump(mode="json")
        assert f"on {v.set} as the gate judges" in line
        lb = v.lower_bound
        assert (card.refused is None) == (lb is not None and lb > 0)  # the set decides
    blend = load_map(in_tmp / "maps" / "v2-to-v1-blend").card
    assert blend.role == "query-blend" and metrics["v2-to-v1-blend"]["blend"]["weight"] == (
        blend.blend.weight
    )
    assert "blend weight" in out[1] and metrics["v2-to-v1"]["blend"] is None
    assert len(list((in_tmp / "cache" / "embeddings").glob("*.npz"))) == 4
