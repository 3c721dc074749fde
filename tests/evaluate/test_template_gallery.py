"""Identification against a template gallery (one re-normalised mean embedding per class)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compat.evaluate.config import EvaluateConfig
from compat.evaluate.manifest import evaluate_manifest
from compat.evaluate.protocols import Identification, create_protocols, evaluate_sets
from compat.evaluate.ranking import template_gallery

# Class a (label 0): three unit vectors, one of them (0.6, -0.8) close to class b's only item.
GALLERY = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, -0.8], [0.8, -0.6]], dtype=np.float32)
GALLERY_LABELS = np.array([0, 0, 0, 1])
# q1 (a): nearest item a1 (0.96) beats b (0.936), but a's template scores 0.918 < 0.936.
# q2 (b): a's outlier item scores 1.0 > b's 0.96, but a's template scores 0.496 < 0.96.
# q3 (a): right both ways.
QUERY = np.array([[0.96, -0.28], [0.6, -0.8], [0.8, 0.6]], dtype=np.float32)
QUERY_LABELS = np.array([0, 1, 0])


def test_templates_are_the_renormalised_class_means_by_hand():
    templates, labels = template_gallery(GALLERY, GALLERY_LABELS)
    assert labels.tolist() == [0, 1]
    a = np.array([1.6, 0.2]) / np.hypot(1.6, 0.2)  # (1,0) + (0,1) + (0.6,-0.8), normalised
    np.testing.assert_allclose(templates, [a, [0.8, -0.6]], atol=1e-6)
    assert templates.dtype == np.float32


def test_template_and_instance_galleries_rank_differently_by_hand():
    instance = Identification().evaluate(QUERY, QUERY_LABELS, GALLERY, GALLERY_LABELS)
    template = Identification(gallery="template").evaluate(
        QUERY, QUERY_LABELS, GALLERY, GALLERY_LABELS
    )
    # First rank of each query's class: instance q2 is beaten by a's outlier item,
    # template q1 by b (the only template above a's).
    assert instance.stats.first_rank.tolist() == [1, 2, 1]
    assert template.stats.first_rank.tolist() == [2, 1, 1]
    assert instance.metrics["top1"] == pytest.approx(2 / 3)
    assert template.metrics["top1"] == pytest.approx(2 / 3)
    # One positive per query among the templates: AP = 1 / rank.
    assert template.metrics["mAP"] == pytest.approx((1 / 2 + 1 + 1) / 3)
    assert template.metrics["top5"] == 1.0


def _slow_templates(gallery: np.ndarray, labels: np.ndarray) -> np.ndarray:
    rows = []
    for c in sorted(set(labels.tolist())):
        mean = gallery[labels == c].astype(np.float64).mean(axis=0)
        rows.append(mean / np.linalg.norm(mean))
    return np.array(rows)


def test_templates_equal_a_per_class_loop_on_random_data():
    rng = np.random.default_rng(3)
    g = rng.standard_normal((200, 16)).astype(np.float32)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    labels = rng.integers(0, 23, size=200)
    templates, classes = template_gallery(g, labels)
    np.testing.assert_array_equal(classes, np.unique(labels))
    np.testing.assert_allclose(templates, _slow_templates(g, labels), atol=1e-6)


def test_template_top1_equals_nearest_template_on_random_data():
    rng = np.random.default_rng(4)
    centers = rng.standard_normal((9, 8))
    gl = np.repeat(np.arange(9), 4)
    ql = np.repeat(np.arange(9), 3)
    g = centers[gl] + rng.standard_normal((gl.size, 8))
    q = centers[ql] + rng.standard_normal((ql.size, 8))
    g = (g / np.linalg.norm(g, axis=1, keepdims=True)).astype(np.float32)
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    result = Identification(gallery="template").evaluate(q, ql, g, gl)
    scores = q @ _slow_templates(g, gl).T
    nearest = np.argmax(scores, axis=1)  # template index = class here
    # The fast templates differ from the slow ones by up to 1e-6 and are scored by torch: the
    # nearest template is the same on both paths while each query's best template beats its
    # second by far more than that.
    top2 = np.sort(scores, axis=1)[:, -2:]
    assert (top2[:, 1] - top2[:, 0]).min() > 1e-4
    assert result.metrics["top1"] == pytest.approx(np.mean(nearest == ql))


def test_config_passes_the_gallery_to_identification_only():
    cfg = EvaluateConfig(chain=["v1"], gallery="template")
    ident, openset = create_protocols(["identification", "open-set"], **cfg.protocol_options())
    assert ident.gallery == "template"
    assert not hasattr(openset, "gallery")
    assert EvaluateConfig(chain=["v1"]).gallery == "instance"
    with pytest.raises(ValueError):
        EvaluateConfig(chain=["v1"], gallery="per-class")
    with pytest.raises(ValueError, match="gallery must be one of"):
        Identification(gallery="mean")


def test_open_set_keeps_the_instance_gallery_next_to_a_template_identification():
    ident, openset = create_protocols(["identification", "open-set"], gallery="template")
    out = evaluate_sets([ident, openset], QUERY, QUERY_LABELS, GALLERY, GALLERY_LABELS)
    assert out["identification"].stats.first_rank.tolist() == [2, 1, 1]
    # open-set ranks the instances: q2's best item is a's outlier (wrong identity)
    assert out["open-set"].correct.tolist() == [True, False, True]


def test_manifest_with_disjoint_query_and_gallery_and_overlap_refused():
    emb = np.concatenate([QUERY, GALLERY])
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(7)],
        labels=["a", "b", "a", "a", "a", "a", "b"],
        query=[0, 1, 2],
        gallery=[3, 4, 5, 6],
        pairs=[],
    )
    out = evaluate_manifest(manifest, emb, emb, [Identification(gallery="template")])
    assert out["identification"].stats.first_rank.tolist() == [2, 1, 1]
    manifest.query = [0, 1, 2, 3]  # item 3 is also a gallery item
    with pytest.raises(ValueError, match="template gallery needs queries"):
        evaluate_manifest(manifest, emb, emb, [Identification(gallery="template")])
