"""A served map's card is checked against the versions it serves, from/to and weights alike
(issue 45 item 2), by one function (:func:`compat.models.card.check_joined`, reached through
:meth:`compat.maps.SpaceMap.check_serves`): in the gate, ``compat score --query-adapter``, the
MLflow model and ``compat backfill``. A map fitted for other versions is exit 4 naming its card,
never a verdict or a score."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from compat.errors import BadInputError
from tests.conftest import one_line_error

runner = CliRunner()
A, B, C = "a" * 64, "b" * 64, "c" * 64


def _pairs(seed: int = 0, n: int = 240, d: int = 16):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((12, d))
    labels = np.arange(n) % 12
    old = centres[labels] + 0.3 * rng.standard_normal((n, d))
    q, _ = np.linalg.qr(np.random.default_rng(99).standard_normal((d, d)))
    new = (centres[labels] + 0.3 * rng.standard_normal((n, d))) @ q
    unit = lambda x: (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    return unit(new), unit(old), labels


def _fit(folder, source: str, target: str, role: str = "query-adapter", weights=(None, None)):
    from compat.maps import CheckConfig, fit_map, save_map

    new, old, labels = _pairs()
    x, y = (new, old) if role == "query-adapter" else (old, new)
    info = [{"version": v, **({"weights_sha256": w} if w else {})} for v, w in
            zip((source, target), weights, strict=True)]  # fmt: skip
    fitted = fit_map("procrustes", x, y, labels=list(labels), role=role, from_name=source,
                     to_name=target, source_info=info[0], target_info=info[1],
                     check=CheckConfig(refuse=False))  # fmt: skip
    save_map(folder, fitted)


# ---------------------------------------------------------------------- the one check


def test_a_map_card_is_checked_for_versions_and_weights(tmp_path):
    from compat.maps import Joins, open_map

    _fit(tmp_path / "m", "v3", "v1", weights=(A, B))
    m = open_map(tmp_path / "m")
    m.check_serves("query-adapter", joins=Joins(source="v3", target="v1", from_weights=A,
                                                to_weights=B))  # fmt: skip
    m.check_serves("query-adapter", joins=Joins(source="v3", target="v1"))  # unknown: skipped
    with pytest.raises(BadInputError, match=r"card\.json: from/to: the map joins v3 -> v1, not v3-paragon -> v1$"):  # fmt: skip
        m.check_serves("query-adapter", joins=Joins(source="v3-paragon", target="v1"))
    with pytest.raises(BadInputError, match=r"to_weights_sha256: the map was fitted on v1 weights bbbbbbbbbbbb\.\.\., but the registered ones are cccccccccccc\.\.\."):  # fmt: skip
        m.check_serves("query-adapter", joins=Joins(source="v3", target="v1", to_weights=C,
                                                    weights_origin="the registered ones are"))  # fmt: skip


# ---------------------------------------------------------------------- the gate


def _register(project, version, emb):
    r = runner.invoke(app, ["register", version, "--embeddings", str(project.bundle(version, emb))])
    assert r.exit_code == 0, r.output


def _gate_setup(project, serve: str) -> None:
    project.contract("v1")
    path = project.contract("v3", parent="v1")
    path.write_text(path.read_text() + serve)
    _register(project, "v1", project.embeddings(1.5, 1))
    _register(project, "v3", project.embeddings(0.6, 2, rotate=True))
    assert runner.invoke(app, ["promote", "v1"]).exit_code == 0


def _gate_map(project, folder, source, target, role="query-adapter"):
    from compat.maps import fit_map, save_map

    old, new = project.embeddings(1.5, 11), project.embeddings(0.6, 12, rotate=True)
    x, y = (new, old) if role == "query-adapter" else (old, new)
    save_map(folder, fit_map("procrustes", x, y, labels=list(project.codes), role=role,
                             from_name=source, to_name=target))  # fmt: skip


def test_the_gate_refuses_an_adapter_fitted_for_other_versions(project):
    """Issue 45 item 2: a contract serving v3 through maps/v3-paragon-to-v1 passed the gate."""
    _gate_setup(project, "serve: {mode: query-adapter, map: maps/v3-paragon-to-v1}\n")
    _gate_map(project, project.root / "maps" / "v3-paragon-to-v1", "v3-paragon", "v1")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1"])
    one_line_error(r, 4, "maps/v3-paragon-to-v1/card.json: from/to: the map joins v3-paragon -> v1",
              "the contract serves v3's queries on v1's gallery")  # fmt: skip
    assert "compat.verdict.passed" not in runner.invoke(app, ["show", "v3", "--json"]).stdout
    # the adapter fitted for v3 -> v1 passes: tests/registry/test_promote_serve.py


def test_the_gate_refuses_a_gallery_map_fitted_for_other_versions(project):
    _gate_setup(project, "serve: {mode: backfill, map: maps/g}\n")
    _gate_map(project, project.root / "maps" / "g", "v0", "v3", role="gallery-map")
    r = runner.invoke(app, ["promote", "v3", "--against", "v1", "--dry-run"])
    one_line_error(r, 4, "maps/g/card.json: from/to: the map joins v0 -> v3",
              "the contract needs v1 -> v3")  # fmt: skip


# ---------------------------------------------------------------------- score


def test_score_refuses_an_adapter_of_other_versions_or_weights(tmp_path):
    new, old, labels = _pairs(1)
    meta = {"weights_sha256": A}
    save_bundle(tmp_path / "q3.npz", EmbeddingBundle(new, labels, version="v3", meta=meta))
    save_bundle(tmp_path / "q2.npz", EmbeddingBundle(new, labels, version="v2", meta=meta))
    save_bundle(tmp_path / "g1.npz", EmbeddingBundle(old, labels, version="v1"))
    _fit(tmp_path / "ok", "v3", "v1", weights=(A, None))
    _fit(tmp_path / "stale", "v3", "v1", weights=(C, None))
    base = ["score", "-g", str(tmp_path / "g1.npz"), "-p", "identification", "--json"]
    assert runner.invoke(app, [*base, "-q", str(tmp_path / "q3.npz"), "--query-adapter",
                               str(tmp_path / "ok")]).exit_code == 0  # fmt: skip
    r = runner.invoke(app, [*base, "-q", str(tmp_path / "q2.npz"), "--query-adapter",
                            str(tmp_path / "ok")])  # fmt: skip
    one_line_error(r, 4, "ok/card.json: from/to: the map joins v3 -> v1, not v2 -> v1")
    r = runner.invoke(app, [*base, "-q", str(tmp_path / "q3.npz"), "--query-adapter",
                            str(tmp_path / "stale")])  # fmt: skip
    one_line_error(r, 4, "from_weights_sha256: the map was fitted on v3 weights cccccccccccc",
              "the files' meta records aaaaaaaaaaaa")  # fmt: skip


def test_score_an_adapter_into_another_width_than_the_gallery_isone_line_error(tmp_path):
    """Issue 45 item 5: a 16 -> 8 adapter on a 16-wide gallery was a ValueError traceback."""
    from compat.maps import fit_map, save_map

    new, old, labels = _pairs(2)
    save_bundle(tmp_path / "q.npz", EmbeddingBundle(new, labels))
    save_bundle(tmp_path / "g.npz", EmbeddingBundle(old, labels))
    save_map(tmp_path / "narrow", fit_map("procrustes", new, old[:, :8] / np.linalg.norm(
        old[:, :8], axis=1, keepdims=True), labels=list(labels)))  # fmt: skip
    r = runner.invoke(app, ["score", "-q", str(tmp_path / "q.npz"), "-g", str(tmp_path / "g.npz"),
                            "--query-adapter", str(tmp_path / "narrow"), "--allow-refused"])  # fmt: skip
    one_line_error(r, 4, "narrow/card.json: out_dim: the map writes 8-dim rows", "16-dim")


# ---------------------------------------------------------------------- backfill


def test_backfill_refuses_a_gallery_map_fitted_on_other_weights(tmp_path):
    _, old, labels = _pairs(3)
    _fit(tmp_path / "g", "v1", "v2", role="gallery-map", weights=(A, B))
    for name, made_by in (("ours", A), ("theirs", C)):
        save_bundle(tmp_path / f"{name}.npz", EmbeddingBundle(
            old, labels, version="v1", meta={"items": "x", "weights_sha256": made_by}))  # fmt: skip
    args = ["backfill", "--from", "v1", "--to", "v2", "--psi", str(tmp_path / "g"), "--no-progress"]
    r = runner.invoke(app, [*args, "--gallery", str(tmp_path / "ours.npz"), "--out",
                            str(tmp_path / "up1.npz")])  # fmt: skip
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*args, "--gallery", str(tmp_path / "theirs.npz"), "--out",
                            str(tmp_path / "up2.npz")])  # fmt: skip
    one_line_error(r, 4, "g/card.json: from_weights_sha256: the map was fitted on v1 weights aaaaaaaaaaaa",
              "theirs.npz were made by (meta.weights_sha256) cccccccccccc")  # fmt: skip
    assert not (tmp_path / "up2.npz").exists()


# ---------------------------------------------------------------------- the MLflow model


def test_the_mlflow_model_refuses_an_adapter_of_other_versions(tmp_path):
    from compat.models.card import ModelCard
    from compat.registry.mlflow_model import check_adapter

    _fit(tmp_path / "m", "v3-paragon", "v1", weights=(A, B))
    card = ModelCard.model_validate(
        {
            "version": "v3",
            "backbone": "tiny",
            "dim": 16,
            "weights_sha256": A,
            "parent": "v1",
            "parent_weights_sha256": B,
            "in_channels": 1,
            "image_size": 8,
            "pooling": "avg",
        }
    )
    with pytest.raises(BadInputError, match="from/to: the map joins v3-paragon -> v1"):
        check_adapter(tmp_path / "m", card)
    _fit(tmp_path / "ok", "v3", "v1", weights=(A, B))
    assert check_adapter(tmp_path / "ok", card) == 16
    _fit(tmp_path / "stale", "v3", "v1", weights=(A, C))
    with pytest.raises(BadInputError, match="to_weights_sha256: the map was fitted on v1"):
        check_adapter(tmp_path / "stale", card)
