"""``compat backfill`` through typer's runner: exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, load_bundle, save_bundle
from compat.embeddings.reader import load_gallery
from compat.io import sha256_file
from compat.maps.psi import UpgradeModule, save_upgrade
from tests.conftest import one_line_error

runner = CliRunner()


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _psi(folder: Path, in_dim=8, out_dim=8, source="v1", target="v2"):
    torch.manual_seed(0)
    psi = UpgradeModule(in_dim, out_dim, hidden=16).eval()
    save_upgrade(folder, psi, {"from": source, "to": target, "loss": "mse"})


def _gallery(path: Path, n=30, d=8, version="v1", nan=False):
    emb = _unit(np.random.default_rng(0).standard_normal((n, d)))
    if nan:
        emb[2, 0] = np.nan
        np.savez(path, embeddings=emb, labels=np.arange(n), version=version)
        return
    save_bundle(path, EmbeddingBundle(embeddings=emb, labels=np.arange(n), version=version))


@pytest.fixture()
def proj(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _psi(tmp_path / "models" / "v2" / "upgrade")
    _gallery(tmp_path / "g.npz")
    return tmp_path


def cli(*args):
    return runner.invoke(app, ["backfill", *args])


BASE = ("--gallery", "g.npz", "--from", "v1", "--to", "v2", "--out", "g2.npz")


def test_backfill_succeeds_and_reports(proj):
    digest = sha256_file("g.npz")
    r = cli(*BASE, "--no-progress")
    assert r.exit_code == 0, r.output
    assert (
        "backfill: 30 of 30 rows upgraded v1 -> v2 in 1 batches; 30 rows in v2, 0 in v1" in r.stdout
    )
    assert load_bundle("g2.npz").row_versions == ["v2"] * 30
    assert sha256_file("g.npz") == digest


def test_partial_backfill_json(proj):
    r = cli(*BASE, "--fraction", "0.25", "--order", "random", "--seed", "3", "--json",
            "--batch-size", "4", "--no-progress")  # fmt: skip
    assert r.exit_code == 0, r.output
    res = json.loads(r.stdout)
    assert (res["upgraded"], res["remaining"], res["batches"]) == (7, 23, 8)  # blocks of the file
    assert load_bundle("g2.npz").row_versions.count("v2") == 7


def test_missing_files_exit_3(proj):
    one_line_error(cli(*BASE[:1], "nope.npz", *BASE[2:]), 3, "nope.npz: file not found")
    one_line_error(cli(*BASE, "--models", "elsewhere"), 3, "upgrade module card not found")


def test_bad_input_exit_4(proj):
    _gallery(Path("g0.npz"), version="v0")
    one_line_error(
        cli("--gallery", "g0.npz", *BASE[2:]), 4, "row 0 was made by 'v0', not by --from 'v1'"
    )
    _gallery(Path("wide.npz"), d=12)
    one_line_error(cli("--gallery", "wide.npz", *BASE[2:]), 4, "psi takes 8-dim rows")
    _gallery(Path("nan.npz"), nan=True)
    one_line_error(cli("--gallery", "nan.npz", *BASE[2:]), 4, "NaN or inf (first in row 2)")
    _psi(Path("other"), source="v0")
    one_line_error(cli(*BASE, "--psi", "other"), 4, "psi upgrades v0 -> v2")
    assert not Path("g2.npz").exists()


def test_usage_errors_exit_2(proj):
    one_line_error(cli(*BASE[:6], "--out", "g.npz"), 2, "is the input gallery")
    one_line_error(cli(*BASE, "--order", "newest"), 2, "--order 'newest'")
    assert cli(*BASE, "--fraction", "1.5").exit_code == 2


def test_unwritable_out_exit_2_one_line(proj):
    Path("afile").write_text("x")
    one_line_error(cli(*BASE[:6], "--out", "afile/g2.npz"), 2, "afile is a file, not a folder")
    one_line_error(cli(*BASE[:6], "--out", "/proc/g2.npz"), 2, "--out /proc/g2.npz")
    one_line_error(cli(*BASE[:6], "--out", "/proc/self/g2"), 2, "--out /proc/self/g2")
    one_line_error(cli(*BASE[:6], "--out", "g2.h5"), 2, "unknown gallery format '.h5'")
    one_line_error(cli(*BASE, "--engine", "spark"), 2, "--engine 'spark'")
    assert not list(Path().glob(".g2*"))


def test_backfill_to_parquet_and_npy_and_back(proj):
    assert cli(*BASE[:6], "--out", "shards", "--no-progress").exit_code == 0
    assert sorted(p.name for p in Path("shards").iterdir()) == [
        "_compat.json", "batch-000000.parquet"
    ]  # fmt: skip
    r = cli("--gallery", "shards", "--from", "v1", "--to", "v2", "--out", "g3.npy")
    assert r.exit_code == 0, r.output  # every row is in v2 already: nothing to do, copied
    assert Path("g3.npy").is_file() and Path("g3.meta.npz").is_file()
    np.testing.assert_array_equal(np.load("g3.npy"), load_gallery("shards").embeddings)


def test_refused_psi_upgrades_nothing_and_writes_nothing(proj):
    from compat.models.card import UpgradeRefusal, read_upgrade_card, write_upgrade_card

    folder = proj / "models" / "v2" / "upgrade"
    card = read_upgrade_card(folder)
    refused = UpgradeRefusal(reason="held-out top-1 0.40 with psi against 0.45 without it",
                             metric="top1", psi=0.40, backward=0.45)  # fmt: skip
    write_upgrade_card(folder, card.model_copy(update={"refused": refused}))
    r = cli(*BASE, "--no-progress")
    assert r.exit_code == 7, r.output  # nothing upgraded: `backfill && deploy` must stop
    assert "no upgrade: psi v1 -> v2 was refused" in r.stdout and "0.45 without it" in r.stdout
    assert "(exit 7; --allow-refused accepts this)" in r.stdout
    assert not (proj / "g2.npz").exists()
    r = cli(*BASE, "--no-progress", "--json")
    assert r.exit_code == 7
    res = json.loads(r.stdout)
    assert (res["upgraded"], res["remaining"]) == (0, 30) and res["refused"].startswith("held-out")
    assert res["written"] is False and res["why"].startswith("psi was refused when it was fitted")
    accepted = cli(*BASE, "--no-progress", "--allow-refused", "--json")
    assert accepted.exit_code == 0 and json.loads(accepted.stdout)["written"] is False
    assert not (proj / "g2.npz").exists()


def test_engine_ray_without_ray_installed_is_a_usage_error_naming_the_extra(proj, monkeypatch):
    """Ray is an optional dependency (``pip install 'compat[ray]'``): without it, one line and
    exit 2, nothing written."""
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    one_line_error(cli(*BASE, "--engine", "ray"), 2, "pip install 'compat[ray]'")
    assert not Path("g2.npz").exists()
