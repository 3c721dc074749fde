"""The reports are formatters over the comparison engine: their numbers equal those of the code
they replaced, which called the bootstrap directly. The reference below is that code's
computation (the paired bootstrap of each protocol's cells, stream = protocol name, percentile
intervals, lower bounds of paired differences, BCT Eq. 9 gains and their resampled intervals),
so the report's keys, order and float values are pinned without a golden file."""

from __future__ import annotations

import json
import math

import numpy as np

from compat.compare import matrix as mx
from compat.compare.bootstrap import bootstrap, lower_bound, percentile_interval
from compat.evaluate.config import EvaluateConfig
from compat.evaluate.forward import evaluate_forward
from compat.evaluate.manifest import evaluate_manifest, label_codes
from compat.evaluate.protocols import create_protocols
from compat.evaluate.report import evaluate_chain

from .test_forward import synthetic


def _n(x):
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _reference_chain(manifest, emb, cfg):
    """Matrix, interval, difference and gain sections the way the replaced code built them."""
    protocols = create_protocols(cfg.protocols, **cfg.protocol_options())
    codes = label_codes(manifest.labels)
    cells = mx.matrix_cells(cfg.chain, cfg.full_square) + [(p, p) for p in cfg.paragon.values()]
    res = {
        c: evaluate_manifest(manifest, emb[c[0]], emb[c[1]], protocols, codes=codes) for c in cells
    }
    out = {"matrix": {}, "interval": {}, "difference": {}, "gain": {}}
    conf = cfg.confidence
    for p in protocols:
        per = {c: r[p.name] for c, r in res.items()}
        boot = bootstrap(per, resamples=cfg.bootstrap, seed=cfg.seed, stream=p.name)
        for m in p.metric_names():
            val = {c: r.metrics[m] for c, r in per.items()}
            for (q, g), v in val.items():
                out["matrix"].setdefault(p.name, {}).setdefault(m, {}).setdefault(q, {})[g] = _n(v)
                lo, hi = boot.interval((q, g), m, conf)
                out["interval"].setdefault(p.name, {}).setdefault(m, {}).setdefault(q, {})[g] = [
                    _n(lo), _n(hi)
                ]  # fmt: skip
            for i, new in enumerate(cfg.chain):
                for old in cfg.chain[:i]:
                    d = boot.difference((new, old), (old, old), m)
                    lo, hi = percentile_interval(d, conf)
                    diff = {
                        "value": _n(val[(new, old)] - val[(old, old)]),
                        "interval": [_n(lo), _n(hi)],
                        "lower_bound": _n(lower_bound(d, conf)),
                    }
                    out["difference"].setdefault(p.name, {}).setdefault(m, {}).setdefault(new, {})[
                        old
                    ] = diff
                    par = cfg.paragon.get(new)
                    if par is None:
                        continue
                    gain = mx.update_gain(val[(new, old)], val[(old, old)], val[(par, par)])
                    s = boot.samples
                    gs = mx.gain_samples(s[(new, old)][m], s[(old, old)][m], s[(par, par)][m])
                    lo, hi = percentile_interval(gs, conf)
                    entry = {"paragon": par, **gain.to_json(), "interval": [_n(lo), _n(hi)]}
                    entry["value"] = _n(gain.value)
                    out["gain"].setdefault(p.name, {}).setdefault(m, {}).setdefault(new, {})[
                        old
                    ] = entry
    return out


def test_chain_report_equals_the_direct_bootstrap():
    manifest, emb, _ = synthetic()
    emb = {**emb, "v0": emb["v1"][:, ::-1].copy()}
    cfg = EvaluateConfig(
        chain=["v0", "v1", "v2"], paragon={"v2": "v2p"}, bootstrap=120, seed=2, confidence=0.9
    )
    rep = evaluate_chain(manifest, emb, cfg)
    ref = _reference_chain(manifest, emb, cfg)
    for section in ("matrix", "interval", "difference", "gain"):
        assert json.dumps(rep[section]) == json.dumps(ref[section]), section


def test_forward_terms_equal_the_direct_bootstrap():
    manifest, emb, up = synthetic()
    cfg = EvaluateConfig(chain=["v1", "v2"], paragon={"v2": "v2p"}, bootstrap=90, seed=1)
    fwd = evaluate_forward(manifest, emb, {"v2": ("v1", up)}, cfg)["v2"]
    protocols = create_protocols(cfg.protocols, **cfg.protocol_options())
    codes = label_codes(manifest.labels)
    pairs = {
        "old": ("v1", "v1"), "forward": ("v2", None), "self": ("v2", "v2"),
        "backward": ("v2", "v1"), "paragon": ("v2p", "v2p"),
    }  # fmt: skip
    res = {
        t: evaluate_manifest(manifest, emb[q], up if g is None else emb[g], protocols, codes=codes)
        for t, (q, g) in pairs.items()
    }
    for p in protocols:
        per = {t: r[p.name] for t, r in res.items()}
        boot = bootstrap(per, resamples=90, seed=1, stream=p.name)
        for m in p.metric_names():
            e = fwd["metrics"][p.name][m]
            for t, r in per.items():
                assert e[t] == _n(r.metrics[m])
                assert e["interval"][t] == [_n(v) for v in boot.interval(t, m, 0.95)]
            d = boot.difference("forward", "backward", m)
            assert e["forward_minus_backward"] == {
                "value": _n(per["forward"].metrics[m] - per["backward"].metrics[m]),
                "interval": [_n(v) for v in percentile_interval(d, 0.95)],
                "lower_bound": _n(lower_bound(d, 0.95)),
            }
            for term in ("backward", "forward"):
                g = mx.update_gain(
                    per[term].metrics[m], per["old"].metrics[m], per["paragon"].metrics[m]
                )
                assert e[f"gain_{term}"] == g.to_json()
    assert np.isfinite(up).all()
