"""A registered trained version is an MLflow model: ``models:/compat@production`` loads without
pickle and embeds images as compat does; its run holds the training history per epoch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.embed import embed_images
from compat.models.embedding import build_embedding_model
from compat.models.heads import create_head
from compat.models.version import load_version, save_version
from compat.registry.store import Registry

DIM = 16

runner = CliRunner()


def contract(version: str) -> str:
    return f"version: {version}\nembedding_dim: {DIM}\nhead: cosface\n"


TRAINED_AT = "2026-01-02T03:04:05+00:00"  # when the tiny training ended (its card says)
ROWS = [
    {"epoch": 1, "loss": 2.0, "loss_head": 1.5, "lr": 0.1, "seconds": 3.0, "images_per_s": 10.0},
    {"epoch": 2, "loss": 1.0, "loss_head": 0.8, "lr": 0.05, "seconds": 2.0, "images_per_s": 12.0},
    {"epoch": 3, "loss": 0.5, "loss_head": 0.4, "lr": 0.0, "seconds": 1.0, "images_per_s": 14.0},
]


def _train_tiny(root: Path) -> Path:
    """A tiny trained version v1 in ``models/v1`` (3-channel 16 px images, dim 16)."""
    torch.manual_seed(0)
    model = build_embedding_model("tiny", DIM, in_channels=3, image_size=16)
    model.train()(torch.rand(8, 3, 16, 16) * 2 - 1)  # BN running stats off their defaults
    card = {
        "version": "v1", "backbone": "tiny", "pooling": "avg", "dim": DIM, "in_channels": 3,
        "image_size": 16, "head": "cosface", "head_params": {"s": 16.0, "m": 0.2},
        "num_classes": 3, "classes": ["a", "b", "c"], "method": "independent",
        "created_at": TRAINED_AT, "wall_seconds": 6.5, "num_images": 24,
        "data": {"split": "v1", "train_fingerprint": "abcdef0123456789"},
    }  # fmt: skip
    folder = root / "models" / "v1"
    save_version(folder, model.eval(), create_head("cosface", DIM, 3, s=16.0, m=0.2), card)
    summary = {**ROWS[-1], "seconds_total": 6.0, "images_per_s_mean": 12.0}
    (folder / "train_metrics.json").write_text(json.dumps({"epochs": ROWS, "summary": summary}))
    return folder


def promoted_tiny(root: Path, registry_template: Path) -> Path:
    """In ``root``: a tiny trained v1, registered from its weights and promoted."""
    shutil.copytree(registry_template, root / "registry")
    _train_tiny(root)
    (root / "contracts").mkdir()
    (root / "contracts" / "v1.yaml").write_text(contract("v1"))
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        for args in (["register", "v1"], ["promote", "v1", "--against", "none"]):
            r = runner.invoke(app, args)
            assert r.exit_code == 0, r.output
    return root


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory, registry_template: Path):
    """v1 trained, registered and promoted: the production version (built once per module)."""
    root = promoted_tiny(tmp_path_factory.mktemp("mlflow-model"), registry_template)
    # Explicit: MLFLOW_TRACKING_URI may name another test's store once this context is left.
    store = root / "registry"
    return root, Registry(uri=f"sqlite:///{store.resolve() / 'mlflow.db'}", root=store)


def _use(reg: Registry) -> None:
    import mlflow

    mlflow.set_registry_uri(reg.uri)
    mlflow.set_tracking_uri(reg.uri)


def test_production_loads_as_pyfunc_and_embeds_like_compat(production):
    import mlflow

    root, reg = production
    _use(reg)
    loaded = mlflow.pyfunc.load_model("models:/compat@production")
    schema = loaded.metadata.get_input_schema()
    assert schema is not None and schema.is_tensor_spec()
    (spec,) = schema.inputs
    assert spec.name == "images" and spec.type == np.dtype(np.uint8)
    assert spec.shape == (-1, 16, 16, 3)

    images = np.random.default_rng(0).integers(0, 256, (10, 16, 16, 3), dtype=np.uint8)
    got = loaded.predict(images)
    model, _ = load_version(root / "models" / "v1")
    want = embed_images(model, images)
    assert got.dtype == np.float32 and got.shape == (10, DIM)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5)

    with pytest.raises(mlflow.exceptions.MlflowException):
        loaded.predict(images.astype(np.float32))  # the schema refuses what is not uint8 images


def test_model_folder_holds_no_pickle_and_keeps_compat_layout(production):
    from mlflow.artifacts import download_artifacts
    from mlflow.models import Model

    _, reg = production
    _use(reg)
    folder = Path(download_artifacts("models:/compat@production"))
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    assert not [n for n in names if n.endswith((".pkl", ".pickle", ".cloudpickle"))]
    assert {"MLmodel", "pyfunc_model.py", "card.json", "weights.safetensors"} <= names
    assert "code/compat/models/version.py" in names
    flavor = Model.load(str(folder / "MLmodel")).flavors["python_function"]
    assert "model_code_path" in flavor and "python_model" not in flavor
    assert {k: v["path"] for k, v in flavor["artifacts"].items()} == {
        "weights": "weights.safetensors",
        "card": "card.json",
    }
    # compat itself reads the same folder: the weights match the card's sha256.
    _, card = load_version(folder)
    assert card.weights_sha256 == reg.get("v1").tags["compat.weights_sha256"]


def test_training_history_is_logged_per_epoch(production):
    _, reg = production
    client = reg.client
    run_id = reg.get("v1").run_id
    history = client.get_metric_history(run_id, "train/loss")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [
        (1, 2.0),
        (2, 1.0),
        (3, 0.5),
    ]
    stamps = [m.timestamp for m in sorted(history, key=lambda m: m.step)]
    assert stamps[0] < stamps[1] < stamps[2]  # epochs end one after the other
    assert [m.step for m in client.get_metric_history(run_id, "train/seconds_total")] == [3]
    assert "train/lr" in client.get_run(run_id).data.metrics


def test_the_run_is_the_training_named_dated_and_described(production):
    """The run is named by compat's version, starts and ends when training did (the card's
    created_at less its wall seconds, not the registration), its epochs end by then, its
    training data is a dataset input and its description is written in words."""
    from datetime import datetime

    _, reg = production
    run = reg.client.get_run(reg.get("v1").run_id)
    assert run.info.run_name == "v1"
    end = int(datetime.fromisoformat(TRAINED_AT).timestamp() * 1000)
    assert (run.info.start_time, run.info.end_time) == (end - 6500, end)
    stamps = [m.timestamp for m in reg.client.get_metric_history(run.info.run_id, "train/loss")]
    assert max(stamps) == end and min(stamps) == end - 3000  # epochs of 3, 2 and 1 s
    (data,) = run.inputs.dataset_inputs
    assert (data.dataset.name, data.dataset.digest) == ("train:v1", "abcdef0123456789")
    assert json.loads(data.dataset.profile) == {"classes": 3, "images": 24, "split": "v1"}
    assert [(t.key, t.value) for t in data.tags] == [("mlflow.data.context", "training")]
    # promoted as the first version (no parent): the note is the verdict, in one paragraph
    note = run.data.tags["mlflow.note.content"]
    assert note.startswith("v1 has no parent") and "\n" not in note


def test_a_wrong_shape_is_one_line_naming_the_expected_shape(production):
    import mlflow

    _, reg = production
    _use(reg)
    loaded = mlflow.pyfunc.load_model("models:/compat@production")
    for bad, got in [
        (np.zeros((4, 3, 16, 16), np.uint8), "input has shape (4, 3, 16, 16) and dtype uint8"),
        (np.zeros((2, 16, 16, 3), np.float32), "input has shape (2, 16, 16, 3) and dtype float32"),
        (np.zeros((16, 16, 3), np.uint8), "input has shape (16, 16, 3) and dtype uint8"),
    ]:
        with pytest.raises(mlflow.exceptions.MlflowException) as err:
            loaded.predict(bad)
        message = err.value.message
        assert "\n" not in message and len(message) < 200, message
        assert (
            message.startswith(got) and "expected uint8 images of shape (N, 16, 16, 3)" in message
        )
    with pytest.raises(mlflow.exceptions.MlflowException, match="channels first"):
        loaded.predict(np.zeros((4, 3, 16, 16), np.uint8))
    # the declared schema is still there, for people and for serving
    assert loaded.metadata.get_input_schema().inputs[0].shape == (-1, 16, 16, 3)


def test_read_only_images_embed_without_a_warning(production):
    import warnings

    import mlflow

    root, reg = production
    _use(reg)
    loaded = mlflow.pyfunc.load_model("models:/compat@production")
    images = np.random.default_rng(1).integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)
    images.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any UserWarning fails the test
        got = loaded.predict(images)
    model, _ = load_version(root / "models" / "v1")
    np.testing.assert_allclose(got, embed_images(model, images.copy()), rtol=0, atol=1e-6)
    # JSON-like integer pixels (mlflow models serve) embed as the same uint8 images
    np.testing.assert_allclose(loaded.predict(images.astype(np.int64)), got, rtol=0, atol=0)


def test_a_version_served_through_a_query_adapter_returns_old_space_embeddings(
    tmp_path, registry_template
):
    """Issue 27 item 5: the registered MLflow model of a version whose contract says
    ``serve: query-adapter`` carries the adapter and returns what the stored gallery is searched
    with (its ``space`` parameter: ``native`` for the version's own); a serving team loads one
    artefact. Here v1 (dim 16) is served through an adapter into a 12-dim old space."""
    import mlflow

    from compat.maps import fit_map, load_map, save_map
    from tests.maps.conftest import drifted_pairs

    root = tmp_path
    shutil.copytree(registry_template, root / "registry")
    _train_tiny(root)
    (root / "contracts").mkdir()
    (root / "contracts" / "v1.yaml").write_text(
        contract("v1") + "parent: v0\nserve: query-adapter\n"
        "criteria: [{protocol: identification, metric: top1}]\n"
    )
    new, old, labels, _ = drifted_pairs(n=900, d_new=DIM, d_old=12)
    fitted = fit_map("procrustes", new, old, labels=list(labels), from_name="v1", to_name="v0")
    save_map(root / "maps" / "v1-to-v0", fitted)  # a map of other versions is refused
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        r = runner.invoke(app, ["register", "v1"])
        assert r.exit_code == 0, r.output
    store = root / "registry"
    reg = Registry(uri=f"sqlite:///{store.resolve() / 'mlflow.db'}", root=store)
    _use(reg)
    loaded = mlflow.pyfunc.load_model(f"models:/compat/{reg.get('v1').mlflow_version}")
    (out,) = loaded.metadata.get_output_schema().inputs
    assert out.shape == (-1, 12)
    images = np.random.default_rng(0).integers(0, 256, (5, 16, 16, 3), dtype=np.uint8)
    model, _ = load_version(root / "models" / "v1")
    native = embed_images(model, images)
    adapter = load_map(root / "maps" / "v1-to-v0")
    np.testing.assert_allclose(loaded.predict(images), adapter.apply(native), rtol=0, atol=1e-6)
    np.testing.assert_allclose(
        loaded.predict(images, params={"space": "native"}), native, rtol=0, atol=1e-6
    )
    with pytest.raises(mlflow.exceptions.MlflowException, match="space 'both'"):
        loaded.predict(images, params={"space": "both"})
