"""Issue 45 item 5 and "Also seen": options and inputs that ended in a traceback (or were
accepted when they could never work) are the project's one line with the documented exit
code, before any work: a negative --seed, --resamples/--bootstrap past params.yaml's bound,
--min-gain no gain can reach, --device that is not here (on a cache hit too), a FIFO as an
input (exit 4, a non-regular file), and adapt --no-labels reading an .npz without labels."""

from __future__ import annotations

import os

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.bundle import EmbeddingBundle, save_bundle
from tests.conftest import one_line_error, tiny_folder_split

runner = CliRunner()


def _cli(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounds")
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((8, 6))
    labels = np.arange(80) % 8
    x = centres[labels] + 0.2 * rng.standard_normal((80, 6))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    ids = [f"i{k}" for k in range(80)]
    save_bundle(root / "new.npz", EmbeddingBundle(x, labels, ids=ids))
    save_bundle(root / "old.npz", EmbeddingBundle(x[:, ::-1].copy(), labels, ids=ids))
    np.savez(root / "nolabels.npz", embeddings=x, ids=np.asarray(ids))
    os.mkfifo(root / "fifo.npz")
    os.mkfifo(root / "fifo")
    return root


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--seed", "-1"], "--seed: Input should be greater than or equal to 0"),
        (["--resamples", "1000000"], "--resamples: Input should be less than or equal to 100000"),
        (["--min-gain", "5"], "--min-gain: Input should be less than 1"),
    ],
)
def test_adapt_options_out_of_bounds_are_usage_errors(files, tmp_path, extra, said):
    r = _cli("adapt", "--new", files / "new.npz", "--old", files / "old.npz", "--kind", "affine",
             "--out", tmp_path / "m", *extra)  # fmt: skip
    one_line_error(r, 2, said)
    assert not (tmp_path / "m").exists()


def test_other_commands_bound_their_seed_and_resamples(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_error(_cli("score", "-q", files / "new.npz", "-g", files / "old.npz", "--seed", "-1"), 2,
              "--seed -1: expected a seed in 0 .. 2**32 - 1")  # fmt: skip
    one_line_error(_cli("backfill", "--gallery", files / "old.npz", "--from", "v1", "--to", "v2",
                   "--out", "up.npz", "--order", "random", "--seed", "-3"), 2, "--seed -3")  # fmt: skip
    # promote checks them before it opens the registry or evaluates anything
    one_line_error(_cli("promote", "v2", "--against", "v1", "--dry-run", "--seed", "-1"), 2,
              "--seed -1")  # fmt: skip
    one_line_error(_cli("promote", "v2", "--against", "v1", "--dry-run", "--bootstrap", "1000000"), 2,
              "--bootstrap 1000000: expected 0 .. 100,000 resamples")  # fmt: skip
    assert not (tmp_path / "registry").exists()


def test_a_fifo_given_as_an_input_is_bad_input_not_missing(files, tmp_path):
    for fifo in ("fifo.npz", "fifo"):
        r = _cli("adapt", "--new", files / fifo, "--old", files / "old.npz", "--kind", "affine",
                 "--out", tmp_path / "m")  # fmt: skip
        one_line_error(r, 4, "a FIFO (named pipe), not a regular file")
        r = _cli("score", "-q", files / fifo, "-g", files / "old.npz")
        one_line_error(r, 4, "a FIFO (named pipe)")


def test_adapt_no_labels_reads_an_npz_without_labels(files, tmp_path):
    args = ["adapt", "--new", files / "nolabels.npz", "--old", files / "old.npz", "--kind",
            "procrustes", "--out", tmp_path / "m", "--allow-refused"]  # fmt: skip
    one_line_error(_cli(*args), 4, "nolabels.npz: labels: missing key")  # labels were asked for
    r = _cli(*args, "--no-labels")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "m" / "card.json").is_file()


def test_embed_refuses_a_device_that_is_not_here_on_a_cache_hit_too(tmp_path, monkeypatch):
    import torch

    from compat.models.embedding import build_embedding_model
    from compat.models.version import save_version

    monkeypatch.chdir(tmp_path)
    tiny_folder_split(tmp_path, 16, 4)
    torch.manual_seed(0)
    save_version(tmp_path / "models" / "v1", build_embedding_model("tiny", 6, in_channels=1,
                 image_size=8), None, {"version": "v1", "backbone": "tiny", "dim": 6,
                 "in_channels": 1, "image_size": 8, "pooling": "avg"})  # fmt: skip
    base = ["embed", "v1", "--split", "v2", "--quiet"]
    for device in ("tpu", *(() if torch.cuda.is_available() else ("cuda",))):
        one_line_error(_cli(*base, "--out", "a.npz", "--device", device), 2, f"device {device!r}")
    assert _cli(*base, "--out", "a.npz").exit_code == 0  # now the cache holds v1's rows
    for device in ("tpu", *(() if torch.cuda.is_available() else ("cuda",))):
        one_line_error(_cli(*base, "--out", "b.npz", "--device", device), 2, f"device {device!r}")
    assert not (tmp_path / "b.npz").exists()
