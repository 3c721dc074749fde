"""Promote's assembly, unit by unit, without MLflow: where a model's weights come from, how the
registered digests and psi are checked, and that a cached version never loads its model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import compat.registry.assemble as A
from compat.errors import BadInputError
from compat.registry.artifacts import is_model, registered_weights
from compat.registry.store import VersionRecord

FIXTURES = Path(__file__).parents[1] / "models" / "fixtures"


def _rec(name: str, kind: str = "model", sha: str = "s" * 64, **tags: str) -> VersionRecord:
    return VersionRecord(
        name=name, mlflow_version="1", run_id="r", source="",
        tags={"compat.kind": kind, "compat.weights_sha256": sha, **tags},
    )  # fmt: skip


def test_registered_weights_and_kind():
    assert registered_weights(_rec("v1", sha="abc")) == "abc"
    assert registered_weights(VersionRecord("v1", "1", None, "")) == ""
    assert is_model(_rec("v1")) and not is_model(_rec("v1", kind="embeddings"))


def test_model_folder_prefers_the_local_copy_with_the_registered_digest(tmp_path, monkeypatch):
    (tmp_path / "models" / "v1").mkdir(parents=True)
    shutil.copy(FIXTURES / "model_card_v1.json", tmp_path / "models" / "v1" / "card.json")
    sha = json.loads((FIXTURES / "model_card_v1.json").read_text())["weights_sha256"]
    downloads: list[str] = []
    monkeypatch.setattr(A, "download", lambda reg, rec, art: downloads.append(art) or Path("dl"))
    monkeypatch.setattr(A, "check_model", lambda rec, folder: None)  # see test_integrity.py
    assert (
        A.model_folder(None, _rec("v1", sha=sha), tmp_path / "models") == tmp_path / "models" / "v1"
    )
    assert A.model_folder(None, _rec("v1", sha="other"), tmp_path / "models") == Path("dl")
    (tmp_path / "models" / "v1" / "card.json").write_text("{")  # unreadable: the registry's copy
    assert A.model_folder(None, _rec("v1", sha=sha), tmp_path / "models") == Path("dl")
    assert A.model_folder(None, _rec("v9", sha=sha), tmp_path / "models") == Path("dl")
    assert downloads == ["model"] * 3


def _project(tmp_path: Path, monkeypatch) -> A.Paths:
    items = [f"i{k}" for k in range(4)]
    manifest = SimpleNamespace(items=items, labels=["a", "a", "b", "b"], fingerprint="m" * 16)
    monkeypatch.setattr("compat.data.split.load_eval_manifest", lambda path: manifest)
    source = SimpleNamespace(
        fingerprint="p" * 16, load=lambda ids: np.zeros((len(ids), 2, 2, 1), np.uint8)
    )
    monkeypatch.setattr("compat.data.sources.open_source", lambda path: source)
    return A.Paths(models=tmp_path / "models", cache=tmp_path / "cache")


def test_gather_embeddings_loads_a_model_only_on_a_cache_miss(tmp_path, monkeypatch):
    import torch

    paths = _project(tmp_path, monkeypatch)
    loaded: list[str] = []

    def load_version(folder):
        loaded.append(Path(folder).name)
        return torch.nn.Flatten(), None

    monkeypatch.setattr("compat.models.load_version", load_version)
    monkeypatch.setattr(A, "download", lambda reg, rec, art: Path("dl") / rec.name)
    monkeypatch.setattr(A, "check_model", lambda rec, folder: None)  # see test_integrity.py
    records = {"v1": _rec("v1", sha="a" * 64), "v2": _rec("v2", sha="b" * 64)}
    _, emb, fp = A.gather_embeddings(None, ["v1", "v2"], paths, records)
    assert loaded == ["v1", "v2"] and emb["v1"].shape == (4, 4) and fp
    loaded.clear()
    _, again, fp2 = A.gather_embeddings(None, ["v1", "v2"], paths, records)
    assert loaded == [] and fp2 == fp and np.array_equal(again["v2"], emb["v2"])


def _psi_project(tmp_path: Path) -> tuple[A.Paths, dict[str, VersionRecord]]:
    from compat.maps.psi import UpgradeModule, save_upgrade

    save_upgrade(
        tmp_path / "models" / "v2" / "upgrade", UpgradeModule(4, 4, 8).eval(),
        {"from": "v1", "to": "v2", "from_weights_sha256": "a" * 64, "to_weights_sha256": "b" * 64},
    )  # fmt: skip
    records = {"v1": _rec("v1", sha="a" * 64), "v2": _rec("v2", sha="b" * 64)}
    return A.Paths(models=tmp_path / "models"), records


def _contract(forward: bool = True, parent: str = "v1"):
    from compat.contracts.schema import Serve

    return SimpleNamespace(
        version="v2", parent=parent, criteria=[SimpleNamespace(uses_forward=forward)],
        serve=Serve(),
    )  # fmt: skip


def test_upgraded_parent_checks_psi_then_upgrades(tmp_path):
    paths, records = _psi_project(tmp_path)
    emb = {"v1": np.eye(4, dtype=np.float32), "v2": np.eye(4, dtype=np.float32)}
    assert A.upgraded_parent(_contract(forward=False), records, paths, emb) == (None, None)
    up, info = A.upgraded_parent(_contract(), records, paths, emb)
    assert up["v1"].shape == (4, 4) and info["from"] == "v1" and len(info["weights_sha256"]) == 64
    where = tmp_path / "models" / "v2" / "upgrade" / "card.json"
    with pytest.raises(BadInputError, match=r"psi upgrades v1 -> v2, the contract needs v0 -> v2"):
        A.upgraded_parent(
            _contract(parent="v0"),
            {**records, "v0": records["v1"]},
            paths,
            {**emb, "v0": emb["v1"]},
        )
    retrained = {**records, "v1": _rec("v1", sha="c" * 64)}
    with pytest.raises(BadInputError) as err:
        A.upgraded_parent(_contract(), retrained, paths, emb)
    assert str(err.value) == (
        f"{where}: from_weights_sha256: psi was fitted on v1 weights {'a' * 12}..., but the "
        f"registered ones are {'c' * 12}...; re-run upgrade@v2"
    )
    # an embeddings bundle's digest names the file, not weights: never compared
    bundles = {**retrained, "v1": _rec("v1", kind="embeddings", sha="c" * 64)}
    A.upgraded_parent(_contract(), bundles, paths, emb)
    with pytest.raises(BadInputError, match=r"psi takes 4-dim rows, v1's embeddings have 3$"):
        A.upgraded_parent(_contract(), records, paths, {**emb, "v1": np.eye(3, dtype=np.float32)})


# -- a registered bundle must be the evaluation set's rows (issue 30 item 9) ---------------------


def _manifest():
    return SimpleNamespace(items=["i0", "i1", "i2", "i3"], labels=["a", "a", "b", "b"])


def _b(ids, labels):
    from compat.embeddings.bundle import EmbeddingBundle

    emb = np.arange(8, dtype=np.float32).reshape(4, 2)
    return EmbeddingBundle(embeddings=emb, labels=np.asarray(labels), ids=ids)


def test_rows_are_put_in_the_evaluation_sets_order_by_ids():
    rows = A.eval_rows(_b(["i2", "i0", "i3", "i1"], [7, 3, 7, 3]), _manifest(), "v2.npz", "e.json")
    np.testing.assert_array_equal(rows[:, 0], [2, 6, 0, 4])  # bundle rows 1, 3, 0, 2
    # without ids, rows in order with any integers naming the classes one to one
    rows = A.eval_rows(_b(None, [9, 9, 1, 1]), _manifest(), "v2.npz", "e.json")
    np.testing.assert_array_equal(rows[:, 0], [0, 2, 4, 6])


@pytest.mark.parametrize(
    ("ids", "labels", "message"),
    [
        (None, [0, 1, 0, 1], r"v2\.npz: labels: do not match e\.json row for row \(no ids: rows "
         r"in e\.json order\): class 'a' has labels 0 and 1 \(item 'i1', bundle row 1\)"),
        (None, [0, 0, 0, 1], r"label 0 is given to classes 'a' and 'b' \(item 'i2'"),
        (["i2", "i0", "i3", "i1"], [3, 3, 7, 7], r"do not match e\.json by its ids: class 'a' "
         r"has labels 3 and 7"),
        (["i0", "i0", "i2", "i3"], [0, 0, 1, 1], r"ids: 'i0' appears twice \(rows 0 and 1\)"),
    ],
    ids=["shuffled-no-ids", "merged-classes", "ids-with-wrong-labels", "duplicate-id"],
)  # fmt: skip
def test_rows_that_are_not_the_evaluation_sets_are_refused(ids, labels, message):
    with pytest.raises(BadInputError, match=message):
        A.eval_rows(_b(ids, labels), _manifest(), "v2.npz", "e.json")


def test_rows_whose_inner_products_overflow_are_refused():
    b = _b(None, [0, 0, 1, 1])
    b.embeddings[2] = [3e19, 1e19]  # finite float32; its squared norm is not
    with pytest.raises(BadInputError, match=r"v2\.npz: embeddings: row 2 has norm 3\.16e\+19"):
        A.eval_rows(b, _manifest(), "v2.npz", "e.json")


def test_a_shuffled_bundle_is_refused_at_the_gate(project):
    """The issue's case end to end: rows shuffled against splits/eval.json, without ids, so
    the labels disagree with the split: promote exits 4 instead of gating it."""
    from typer.testing import CliRunner

    from compat.cli.main import app
    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    runner = CliRunner()
    project.register("v1", noise=1.5, seed=1)
    project.contract("v2", parent="v1")
    perm = np.random.default_rng(0).permutation(len(project.items))
    path = project.root / "bundles" / "v2.npz"
    save_bundle(path, EmbeddingBundle(embeddings=project.embeddings(0.8, 2)[perm],
                                      labels=project.codes[perm], version="v2"))  # fmt: skip
    assert runner.invoke(app, ["register", "v2", "--embeddings", str(path)]).exit_code == 0
    assert runner.invoke(app, ["promote", "v1"]).exit_code == 0
    r = runner.invoke(app, ["promote", "v2", "--against", "v1", "--dry-run"])
    assert r.exit_code == 4, r.output
    [line] = r.output.strip().splitlines()
    assert line.startswith("error: v2.npz: labels: do not match splits/eval.json row for row")
