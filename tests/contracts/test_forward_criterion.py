"""Forward criteria: ``require: forward > cross`` compares M(new, psi(parent)) with M(new, parent)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from compat.contracts.gate import judge, required_cells
from compat.contracts.schema import Contract, Criterion
from compat.errors import BadInputError


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _setup(n_classes=40, per=6, d=16, seed=0):
    rng = np.random.default_rng(seed)
    labels = [f"c{c:02d}" for c in range(n_classes) for _ in range(per)]
    n = len(labels)
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=labels,
        query=[i for i in range(n) if i % per < per // 2],
        gallery=[i for i in range(n) if i % per >= per // 2],
        pairs=[(c * per, c * per + 1, True) for c in range(n_classes)]
        + [(c * per, (c + 1) * per, False) for c in range(n_classes - 1)],
    )  # fmt: skip
    base = rng.standard_normal((n_classes, d))[np.repeat(np.arange(n_classes), per)]
    v2 = _unit(base + 0.5 * rng.standard_normal((n, d)))
    emb = {
        "v0": _unit(base + 1.6 * rng.standard_normal((n, d))),
        "v1": _unit(base + 1.3 * rng.standard_normal((n, d))),
        "v2": v2,
    }
    good = _unit(v2 + 0.1 * rng.standard_normal((n, d)))  # psi(v1) close to v2's space
    bad = _unit(rng.standard_normal((n, d)))  # a broken psi
    return manifest, emb, good, bad


def _contract(require="forward > cross", transitive=()):
    return Contract(
        version="v2", parent="v1", embedding_dim=16, head="cosface", transitive=list(transitive),
        criteria=[
            {"protocol": "identification", "metric": "top1", "require": "cross > self_parent"},
            {"protocol": "identification", "metric": "top1", "require": require, "confidence": 0.95},
        ],
    )  # fmt: skip


def test_schema_knows_the_forward_term():
    c = Criterion(protocol="identification", metric="top1", require="forward > cross")
    assert c.terms == ("forward", "cross") and c.uses_forward
    assert c.describe("v2", "v1") == "identification top1: M(v2, psi(v1)) > M(v2, v1)"
    assert not Criterion(protocol="verification", metric="tar@far=0.1").uses_forward
    with pytest.raises(ValueError, match="two different terms"):
        Criterion(protocol="identification", metric="top1", require="forward > forward")


def test_required_cells_include_the_upgraded_parent():
    cells = required_cells(_contract(), None)
    assert ("v2", "psi(v1)") in cells and ("v2", "v1") in cells


def test_forward_criterion_passes_with_a_good_psi_and_fails_with_a_bad_one():
    manifest, emb, good, bad = _setup()
    verdict = judge(_contract(), manifest, emb, resamples=200, upgraded={"v1": good})
    assert verdict.passed, [r.description for r in verdict.failed()]
    fwd = verdict.results[1]
    assert fwd.lhs == ["v2", "psi(v1)"] and fwd.rhs == ["v2", "v1"] and fwd.gallery == "v1"
    top1 = verdict.matrix["identification"]["top1"]["v2"]
    assert fwd.lhs_value == top1["psi(v1)"] and top1["psi(v1)"] > top1["v1"]
    assert fwd.lower_bound is not None and fwd.lower_bound > 0

    failed = judge(_contract(), manifest, emb, resamples=200, upgraded={"v1": bad})
    assert not failed.passed and [r.require for r in failed.failed()] == ["forward > cross"]


def test_forward_criterion_is_checked_against_the_parent_only():
    manifest, emb, good, _ = _setup()
    verdict = judge(
        _contract(transitive=["v0"]), manifest, emb, resamples=100, upgraded={"v1": good}
    )
    pairs = [(r.require, r.gallery) for r in verdict.results]
    assert pairs == [  # gallery by gallery (one order in promote, show and chain)
        ("cross > self_parent", "v1"),
        ("forward > cross", "v1"),
        ("cross > self_parent", "v0"),
    ]


def test_forward_criterion_without_upgraded_embeddings_is_an_error():
    manifest, emb, *_ = _setup()
    with pytest.raises(BadInputError, match=r"uses forward = M\(v2, psi\(v1\)\)"):
        judge(_contract(), manifest, emb, resamples=0)
    # contracts without forward criteria need no psi (unchanged behaviour)
    plain = Contract(
        version="v2", parent="v1", embedding_dim=16, head="cosface",
        criteria=[{"protocol": "identification", "metric": "top1"}],
    )  # fmt: skip
    assert judge(plain, manifest, emb, resamples=0).passed


def test_forward_against_self_parent_and_self():
    manifest, emb, good, _ = _setup()
    verdict = judge(
        _contract(require="forward > self_parent"), manifest, emb, resamples=100,
        upgraded={"v1": good},
    )  # fmt: skip
    assert verdict.passed
