"""Issue 13: the gate's paragon is the version's own (13.4), and versions of different widths
meet as the contract's ``dim_mismatch`` says (13.7). Embeddings-registered tiny versions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.store import Registry

from .conftest import DIM

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def _register(project, version: str, emb: np.ndarray) -> None:
    r = cli("register", version, "--embeddings", str(project.bundle(version, emb)))
    assert r.exit_code == 0, r.output


def _train_split(version: str, fp: str) -> None:
    """What registering a trained model records: its training split's fingerprint."""
    reg = Registry()
    reg.set_tags(reg.get(version), {"compat.data": fp})


@pytest.fixture
def chain(project):
    project.contract("v1")
    project.contract("v2", parent="v1", paragon="v2p", confidence=None)
    project.contract("v2p")
    _register(project, "v1", project.embeddings(1.5, 1))
    _register(project, "v2", project.embeddings(0.8, 2))
    _register(project, "v2p", project.embeddings(0.5, 3))
    assert cli("promote", "v1").exit_code == 0
    return project


def test_promote_refuses_a_paragon_trained_on_another_split(chain):
    _train_split("v2", "a" * 16)
    _train_split("v2p", "b" * 16)  # e.g. trained on v3's split: the gain would be understated
    r = cli("promote", "v2", "--against", "v1", "--dry-run")
    assert r.exit_code == 4, r.output
    assert "paragon v2p: tag compat.data: paragon v2p was trained on split bbbbbbbbbbbb" in r.output
    assert Registry().production() == "v1"


def test_promote_measures_the_gain_against_the_paragon_of_the_same_split(chain):
    _train_split("v2", "a" * 16)
    _train_split("v2p", "a" * 16)
    r = cli("promote", "v2", "--against", "v1", "--json", "--dry-run")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    m = report["matrix"]["identification"]["top1"]
    gain = report["gain"]["identification"]["top1"]
    expected = (m["v2"]["v1"] - m["v1"]["v1"]) / (m["v2p"]["v2p"] - m["v1"]["v1"])  # BCT Eq. 9
    assert report["paragon"] == "v2p" and gain["value"] == pytest.approx(expected)


def _wider(project, emb: np.ndarray, extra: int, seed: int) -> np.ndarray:
    """``emb`` with ``extra`` noise coordinates appended, re-normalised: its first DIM
    coordinates are a scaled copy of ``emb``."""
    noise = np.random.default_rng(seed).normal(size=(emb.shape[0], extra)).astype(np.float32)
    x = np.concatenate([emb, noise], axis=1)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_a_wider_version_meets_the_old_gallery_as_its_contract_says(project):
    """A 2*DIM-dim v2 against a DIM-dim v1: truncate scores its first DIM coordinates."""
    narrow = project.embeddings(0.8, 2)
    v2 = _wider(project, narrow, DIM, 7)
    project.contract("v1")
    (project.root / "contracts" / "v2.yaml").write_text(
        "version: v2\nparent: v1\nembedding_dim: 32\nhead: cosface\n"
        "criteria:\n  - {protocol: identification, metric: top1}\n"
        "  - {protocol: verification, metric: tar@far=0.1}\n"
    )
    _register(project, "v1", project.embeddings(1.5, 1))
    _register(project, "v2", v2)
    assert cli("promote", "v1").exit_code == 0
    r = cli("promote", "v2", "--against", "v1", "--dry-run")
    assert r.exit_code == 4 and "declare dim_mismatch" in r.output
    with (project.root / "contracts" / "v2.yaml").open("a") as f:
        f.write("dim_mismatch: truncate\n")
    r = cli("promote", "v2", "--against", "v1", "--json", "--dry-run")
    assert r.exit_code == 0, r.output
    matrix = json.loads(r.stdout)["matrix"]
    # By hand: the first DIM coordinates of v2, re-normalised, are the narrow rows themselves.
    # The rows truncate makes, so both promotions score the same bits (the hand-made narrow
    # rows differ from them by an ulp, which a near-tie could turn into another rank).
    from compat.embeddings.dims import fit_dim

    project.contract("v2-narrow", parent="v1", confidence=None)
    _register(project, "v2-narrow", fit_dim(v2, DIM, "truncate"))
    np.testing.assert_allclose(fit_dim(v2, DIM, "truncate"), narrow, rtol=0, atol=1e-6)
    r = cli("promote", "v2-narrow", "--against", "v1", "--json", "--dry-run")
    assert r.exit_code == 0, r.output
    by_hand = json.loads(r.stdout)["matrix"]
    for protocol, metric in (("identification", "top1"), ("verification", "tar@far=0.1")):
        # Verification thresholds span all pairs: unnormalised truncated rows would differ.
        assert matrix[protocol][metric]["v2"]["v1"] == by_hand[protocol][metric]["v2-narrow"]["v1"]
