"""The chain evaluation end to end on synthetic embeddings, the files it writes, and the
runner with a fake model."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from compat.embeddings.cache import EmbeddingCache
from compat.embeddings.embed import cache_key
from compat.errors import BadInputError
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.report import evaluate_chain, flat_metrics, write_report
from compat.evaluate.runner import data_fingerprint, run_evaluation


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def synthetic(n_classes=60, per=6, d=16, seed=0):
    """v1 noisy, v2 less noisy in the same space (compatible), v2p a rotated paragon
    (better, incompatible), v3 independent of everything (random rotation)."""
    rng = np.random.default_rng(seed)
    labels = [f"c{c:03d}" for c in range(n_classes) for _ in range(per)]
    n = len(labels)
    half = per // 2
    query = [i for i in range(n) if i % per < half]
    # The first 6 classes have no gallery item: non-mated probes.
    gallery = [i for i in range(n) if i % per >= half and i // per >= 6]
    pairs = [(int(a), int(b), labels[a] == labels[b]) for a, b in rng.integers(0, n, (600, 2))]
    pairs += [(c * per, c * per + 1, True) for c in range(n_classes)]
    manifest = SimpleNamespace(
        items=[f"i{k}" for k in range(n)], labels=labels, query=query, gallery=gallery,
        pairs=pairs, fingerprint="m1",
    )  # fmt: skip
    centers = rng.standard_normal((n_classes, d))
    lab = np.repeat(np.arange(n_classes), per)
    rot = np.linalg.qr(rng.standard_normal((d, d)))[0]
    base = centers[lab]
    emb = {
        "v1": _unit(base + 1.1 * rng.standard_normal((n, d))),
        "v2": _unit(base + 0.7 * rng.standard_normal((n, d))),
        "v2p": _unit((base + 0.4 * rng.standard_normal((n, d))) @ rot),
    }
    return manifest, emb


def test_report_structure_gains_and_intervals():
    manifest, emb = synthetic()
    cfg = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=200)
    rep = evaluate_chain(manifest, emb, cfg)
    assert rep["cells"] == [["v1", "v1"], ["v2", "v1"], ["v2", "v2"], ["v2p", "v2p"]]
    top1 = rep["matrix"]["identification"]["top1"]
    assert set(top1) == {"v1", "v2", "v2p"} and "v2" not in top1["v1"]  # lower triangle
    assert top1["v2"]["v1"] > top1["v1"]["v1"]  # compatible by construction
    for protocol, by_metric in rep["matrix"].items():
        for metric, rows in by_metric.items():
            for q, row in rows.items():
                for g, value in row.items():
                    lo, hi = rep["interval"][protocol][metric][q][g]
                    assert 0.0 <= lo <= value <= hi <= 1.0, (protocol, metric, q, g)
    gain = rep["gain"]["identification"]["top1"]["v2"]["v1"]
    expected = (top1["v2"]["v1"] - top1["v1"]["v1"]) / (top1["v2p"]["v2p"] - top1["v1"]["v1"])
    assert gain["value"] == pytest.approx(expected) and gain["meaningful"]
    assert gain["paragon"] == "v2p" and gain["interval"][0] <= gain["value"] <= gain["interval"][1]
    diff = rep["difference"]["identification"]["mAP"]["v2"]["v1"]
    lo, hi = diff["interval"]
    assert lo <= diff["value"] <= hi and diff["lower_bound"] >= lo
    seq = rep["sequence"]["identification"]["top1"]
    assert seq["ac"] == 1.0 and seq["strict_ac"] is True
    assert set(rep["counts"]) == {"identification", "open-set", "verification"}
    assert rep["counts"]["open-set"]["non_mated"] == 18
    assert len(rep["cmc"]["v2/v1"]) == 20
    json.dumps(rep, allow_nan=False)  # strict JSON: no NaN anywhere


def test_independent_version_fails_and_dimension_mismatch_is_skipped():
    manifest, emb = synthetic()
    rng = np.random.default_rng(5)
    emb["v3"] = _unit(rng.standard_normal(emb["v2"].shape))  # unrelated model
    emb["v4"] = _unit(rng.standard_normal((emb["v2"].shape[0], 8)))  # other width
    cfg = EvaluateConfig(chain=["v1", "v3", "v4"], bootstrap=50, protocols=["identification"])
    rep = evaluate_chain(manifest, emb, cfg)
    top1 = rep["matrix"]["identification"]["top1"]
    assert top1["v3"]["v1"] < top1["v1"]["v1"]
    assert rep["difference"]["identification"]["top1"]["v3"]["v1"]["value"] < 0
    assert {(s["query"], s["gallery"]) for s in rep["skipped"]} == {("v4", "v1"), ("v4", "v3")}
    assert "v1" not in top1["v4"] and rep["sequence"]["identification"]["top1"]["ac"] is None
    with pytest.raises(ValueError, match="no embeddings for version"):
        evaluate_chain(manifest, emb, EvaluateConfig(chain=["v1", "v9"]))


def test_full_square_and_no_bootstrap():
    manifest, emb = synthetic()
    cfg = EvaluateConfig(
        chain=["v1", "v2"], bootstrap=0, full_square=True, protocols=["verification"]
    )
    rep = evaluate_chain(manifest, emb, cfg)
    assert ["v1", "v2"] in rep["cells"]
    assert (
        rep["interval"] == {}
        and "interval" not in rep["difference"]["verification"]["tar@far=0.1"]["v2"]["v1"]
    )


def test_write_report_files_for_dvc(tmp_path):
    manifest, emb = synthetic()
    cfg = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=50)
    rep = evaluate_chain(manifest, emb, cfg)
    written = write_report(rep, tmp_path / "metrics", tmp_path / "plots")
    names = {p.relative_to(tmp_path).as_posix() for p in written}
    assert {
        "metrics/compat.json", "metrics/identification.json", "metrics/open-set.json",
        "metrics/verification.json", "plots/cmc/v1_on_v1.json", "plots/cmc/v2_on_v1.json",
        "plots/heatmap_identification.png", "plots/cmc.png",
    } <= names  # fmt: skip
    ident = json.loads((tmp_path / "metrics/identification.json").read_text())
    assert ident["M"]["v2"]["v1"]["top1"] == rep["matrix"]["identification"]["top1"]["v2"]["v1"]
    assert (
        ident["gain"]["v2"]["v1"]["mAP"]
        == rep["gain"]["identification"]["mAP"]["v2"]["v1"]["value"]
    )
    assert set(ident["sequence"]["top1"]) == {"ac", "aa", "bc", "fc"}
    curve = json.loads((tmp_path / "plots/cmc/v2_on_v1.json").read_text())
    # Exact by construction: CMC at rank 1 and top-1 are the same integer count over the same
    # number of valid queries, one correctly rounded division each.
    assert curve[0] == {"rank": 1, "accuracy": rep["matrix"]["identification"]["top1"]["v2"]["v1"]}
    assert (tmp_path / "plots/cmc.png").read_bytes()[:4] == b"\x89PNG"
    assert flat_metrics(rep, "open-set")["M"]["v1"]["v1"].keys() == {
        "tpir@fpir=0.1",
        "tpir@fpir=0.01",
    }


class _Fixed(nn.Module):
    """A fake model: the embedding of an image is a row looked up from its pixel value."""

    def __init__(self, table: np.ndarray) -> None:
        super().__init__()
        self.table = torch.from_numpy(table)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        index = ((x[:, 0, 0, 0] + 1) * 127.5).round().long()
        return self.table[index] * 3.0  # not normalised: embed must normalise


def test_runner_embeds_once_then_reads_the_cache(tmp_path):
    manifest, emb = synthetic(n_classes=30, per=6)
    n = len(manifest.items)
    # Give each item a unique pixel value (n <= 256) and make the model return its embedding.
    images = np.zeros((n, 2, 2, 1), np.uint8)
    images[:, 0, 0, 0] = np.arange(n)
    position = {item: k for k, item in enumerate(manifest.items)}

    def load_images(ids):
        return images[[position[i] for i in ids]]

    models = {v: _Fixed(np.pad(e, ((0, 256 - n), (0, 0)))) for v, e in emb.items()}
    cards = {v: SimpleNamespace(weights_sha256=f"sha-{v}") for v in emb}
    cfg = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=20, batch_size=64)

    def load_model(v):
        return models[v], cards[v]

    rep = run_evaluation(cfg, manifest, load_images, "src", load_model, tmp_path / "cache")
    # What the runner embedded: the model's 3 * e re-normalised by torch in float32, so each row
    # is e to a few ulp (observed 6e-8), not bit for bit; 1e-6 bounds that on unit rows.
    cache = EmbeddingCache(tmp_path / "cache")
    fp = data_fingerprint("src", "m1")
    embedded = {v: cache.get(cache_key(f"sha-{v}", fp), ids=manifest.items).embeddings for v in emb}
    for v, e in emb.items():
        np.testing.assert_allclose(embedded[v], e, rtol=0, atol=1e-6, err_msg=v)
    # The matrix: exact by construction, the one evaluation of the same embeddings (an ulp on a
    # score could flip a near-tied rank, so the runner is compared with what it embedded).
    direct = evaluate_chain(manifest, embedded, cfg)
    assert rep["matrix"] == direct["matrix"]
    assert rep["data_fingerprint"] == fp
    assert all(m.calls > 0 for m in models.values())
    assert len(list((tmp_path / "cache").glob("*.npz"))) == 3
    for m in models.values():
        m.calls = 0
    again = run_evaluation(cfg, manifest, load_images, "src", load_model, tmp_path / "cache")
    assert again["matrix"] == rep["matrix"] and all(m.calls == 0 for m in models.values())
    # New weights (another sha256) are embedded again, never served from the old entry.
    cards["v1"] = SimpleNamespace(weights_sha256="sha-v1-retrained")
    run_evaluation(cfg, manifest, load_images, "src", load_model, tmp_path / "cache")
    assert models["v1"].calls > 0 and models["v2"].calls == 0
    # Other pixels (source fingerprint) likewise.
    models["v2"].calls = 0
    run_evaluation(cfg, manifest, load_images, "src2", load_model, tmp_path / "cache")
    assert models["v2"].calls > 0
    cache = EmbeddingCache(tmp_path / "cache")
    assert len(list(cache.root.glob("*.npz"))) == 7


def test_runner_with_weights_of_loads_a_model_only_on_a_cache_miss(tmp_path):
    manifest, emb = synthetic(n_classes=30, per=6)
    n = len(manifest.items)
    images = np.zeros((n, 2, 2, 1), np.uint8)
    images[:, 0, 0, 0] = np.arange(n)
    position = {item: k for k, item in enumerate(manifest.items)}
    models = {v: _Fixed(np.pad(e, ((0, 256 - n), (0, 0)))) for v, e in emb.items()}
    shas = {v: f"sha-{v}" for v in emb}
    loaded: list[str] = []

    def load_model(v):
        loaded.append(v)
        return models[v], SimpleNamespace(weights_sha256=shas[v])

    cfg = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=0, batch_size=64)
    run = lambda: run_evaluation(  # noqa: E731
        cfg, manifest, lambda ids: images[[position[i] for i in ids]], "src", load_model,
        tmp_path / "cache", weights_of=shas.__getitem__,
    )  # fmt: skip
    first = run()
    assert sorted(loaded) == ["v1", "v2", "v2p"]
    loaded.clear()
    assert run()["matrix"] == first["matrix"] and loaded == []  # every version from the cache
    shas["v2"] = "sha-v2-retrained"
    run()
    assert loaded == ["v2"]
    shas["v1"] = ""
    with pytest.raises(BadInputError, match="v1: card: weights_sha256: missing or empty"):
        run()


def _evaluate_stage(monkeypatch, report):
    """The evaluate stage's script with its inputs faked: it writes ``report``."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("stage_evaluate", root / "stages" / "evaluate.py")
    stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stage)
    monkeypatch.setattr(stage, "load_config", lambda *a: SimpleNamespace(device=None, forward={}))
    monkeypatch.setattr("compat.data.split.load_eval_manifest", lambda path: None)
    monkeypatch.setattr("compat.data.sources.open_source", lambda path: SimpleNamespace(
        load=None, fingerprint="f"))  # fmt: skip
    monkeypatch.setattr(stage, "run_evaluation", lambda *a, **k: report)
    return stage


@pytest.mark.parametrize("real", [False, True], ids=["injected", "tmpfs"])
def test_the_evaluate_stage_on_a_full_disk_is_exit_5_in_one_line(
    tmp_path, monkeypatch, capsys, small_disk, real
):
    """issue 31 item 2: the evaluate stage ended in an OSError traceback on a full disk."""
    manifest, emb = synthetic()
    rep = evaluate_chain(manifest, emb, EvaluateConfig(chain=["v1", "v2"], bootstrap=20))
    stage = _evaluate_stage(monkeypatch, rep)
    if real:
        out = small_disk("96k")  # the metrics fit, the plots do not
    else:
        out = tmp_path / "out"
        import compat.evaluate.plots as plots

        monkeypatch.setattr(plots, "write_bytes", _write_fails)
    code = stage.main(["--metrics", str(out / "metrics"), "--plots", str(out / "plots")])
    err = capsys.readouterr().err
    assert code == 5, err
    [line] = err.strip().splitlines()
    assert line.startswith(f"error: {out}/plots/") and ".png: cannot write: no space left" in line
    assert "Traceback" not in err
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*"))


def _write_fails(path, data):
    """compat.io.write_bytes with the disk filling up half-way through."""
    import errno
    import os

    from compat.io import atomic_path

    with atomic_path(path, size=len(data)) as tmp:
        tmp.write_bytes(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
