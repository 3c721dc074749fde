"""The MLflow model of a version served through a query blend (issue 42 item 1): it carries the
blend and its parent's weights, embeds each image with both models (two forward passes) and
returns the blended query the gate checked; ``space: native`` returns the version's own."""

from __future__ import annotations

import shutil

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
from tests.registry.test_mlflow_model import _train_tiny, _use, contract

OLD_DIM = 12
runner = CliRunner()


def _train_tiny_parent(root) -> None:
    """The parent v0 (dim 12, the same 16 px images as v1), its own seed."""
    torch.manual_seed(7)
    model = build_embedding_model("tiny", OLD_DIM, in_channels=3, image_size=16)
    model.train()(torch.rand(8, 3, 16, 16) * 2 - 1)
    card = {
        "version": "v0", "backbone": "tiny", "pooling": "avg", "dim": OLD_DIM, "in_channels": 3,
        "image_size": 16, "head": "cosface", "head_params": {"s": 16.0, "m": 0.2},
        "num_classes": 3, "classes": ["a", "b", "c"], "method": "independent",
        "created_at": "2026-01-01T00:00:00+00:00", "wall_seconds": 1.0, "num_images": 24,
        "data": {"split": "v0", "train_fingerprint": "0123456789abcdef"},
    }  # fmt: skip
    head = create_head("cosface", OLD_DIM, 3, s=16.0, m=0.2)
    save_version(root / "models" / "v0", model.eval(), head, card)


def test_a_version_served_through_a_blend_returns_the_blended_query(tmp_path, registry_template):
    import mlflow

    from compat.maps import CheckConfig, fit_map, load_map, save_map
    from compat.maps.blend import slerp

    root = tmp_path
    shutil.copytree(registry_template, root / "registry")
    _train_tiny(root)
    _train_tiny_parent(root)
    (root / "contracts").mkdir()
    (root / "contracts" / "v1.yaml").write_text(
        contract("v1") + "parent: v0\nserve: query-blend\n"
        "criteria: [{protocol: identification, metric: top1}]\n"
    )
    # pairs: the two tiny models' rows of the same random images
    images = np.random.default_rng(3).integers(0, 256, (240, 16, 16, 3), dtype=np.uint8)
    v1, _ = load_version(root / "models" / "v1")
    v0, v0_card = load_version(root / "models" / "v0")
    new, old = embed_images(v1, images), embed_images(v0, images)
    # two untrained tiny models: the wiring is under test, not the refusal (refuse off)
    fitted = fit_map("procrustes", new, old, role="query-blend", blend={"weight": 0.5},
                     check=CheckConfig(refuse=False), from_name="v1", to_name="v0",
                     target_info={"version": "v0", "weights_sha256": v0_card.weights_sha256})  # fmt: skip
    save_map(root / "maps" / "v1-to-v0-blend", fitted)
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
    assert out.shape == (-1, OLD_DIM)
    probe = images[:5]
    blend = load_map(root / "maps" / "v1-to-v0-blend")
    want = slerp(embed_images(v0, probe), blend.apply(embed_images(v1, probe)), 0.5)
    np.testing.assert_allclose(loaded.predict(probe), want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(
        loaded.predict(probe, params={"space": "native"}), embed_images(v1, probe), atol=1e-6
    )
    # the parent's weights changed since the blend was fitted: its model is not built
    from compat.errors import BadInputError
    from compat.models.card import read_model_card
    from compat.registry.mlflow_model import blend_parent

    torch.manual_seed(9)
    changed = build_embedding_model("tiny", OLD_DIM, in_channels=3, image_size=16).eval()
    card = v0_card.model_dump(mode="json", by_alias=True, exclude_unset=True)
    card.pop("weights_sha256", None)
    save_version(root / "models" / "v0", changed, create_head("cosface", OLD_DIM, 3), card)
    v1_card = read_model_card(root / "models" / "v1")
    with pytest.raises(BadInputError, match="was fitted with v0's weights"):
        blend_parent(root / "maps" / "v1-to-v0-blend", root / "models" / "v1", v1_card)
