"""One verdict: a map checked as the gate checks the configuration that serves it.

The gate (:func:`compat.contracts.gate.judge`) measures a served configuration on the
evaluation set, whose classes no training set contains: identification top-1 of the served
queries on the old gallery, M(served, old), against the old model's self test M(old, old)
(BCT's criterion, Shen et al. CVPR 2020 Eq. 2), and with ``confidence`` requires the
one-sided lower bound of the paired bootstrap of the difference to clear the margin. A map's
own held-out check (:mod:`compat.maps.check`) holds out classes of its fit pairs: classes the
new model was trained on (the pairs are its training split), where its queries are better than
on classes it never saw, and where the old model may have been trained too. The two disagreed:
the affine map of a model trained from scratch was kept by its check (lower bound +0.004) and
lost 1.3 points to keeping v1 on the evaluation classes (issue 42).

:func:`check_on_set` is the gate's measurement run on a held-out set chosen as the evaluation
set is (:class:`CheckSet`; the pipeline's validation split, ``splits/validation.json``: classes
disjoint from every training set and from the evaluation set, :mod:`compat.data.split`): the
same protocol over the set's query and gallery items, the same cells, the same bootstrap stream
(``identification``), the same criterion and bound. When a map has such a set, this check alone
decides whether it is kept (:func:`compat.maps.fit.fit_map`): a kept map then means what a
passed gate means, up to the sampling of the classes, which the interval states.

Served queries by role: a query adapter's adapt(new); a query blend's
slerp(old, adapt(new), w) (:mod:`compat.maps.blend`); a gallery map leaves the queries new and
maps the old gallery, M(new, map(old)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from compat.maps.card import MapRefusal, SetCheck
from compat.maps.config import CheckConfig

METRIC = "top1"
STREAM = "identification"  # the gate's bootstrap stream for this protocol


@dataclass(frozen=True)
class CheckSet:
    """A held-out set whose classes no model of the pair was trained on: its manifest (query and
    gallery items, as :func:`compat.evaluate.manifest.evaluate_manifest` reads them) and both
    versions' rows of its items."""

    name: str  # "split:validation", or a file
    manifest: Any  # compat.evaluate.manifest.EvalSetLike
    new: np.ndarray  # the new version's rows of manifest.items
    old: np.ndarray  # the old version's rows of manifest.items
    fingerprint: str | None = None

    def halves(self, seed: int = 0) -> tuple[CheckSet, CheckSet]:
        """The set divided by class in two (whole classes in each, deterministic for
        ``seed``): the same rows, each half's manifest holding its classes' query and gallery
        items. A query blend selects its weight on the first and is checked on the second."""
        from types import SimpleNamespace

        classes = sorted(set(self.manifest.labels))
        order = np.random.default_rng([seed, 0x5E7]).permutation(len(classes))
        first = {classes[i] for i in order[: len(classes) // 2]}
        out = []
        for k, keep in enumerate((True, False)):
            labels = self.manifest.labels
            m = SimpleNamespace(
                items=self.manifest.items, labels=labels, pairs=[],
                query=[i for i in self.manifest.query if (labels[i] in first) == keep],
                gallery=[i for i in self.manifest.gallery if (labels[i] in first) == keep],
            )  # fmt: skip
            name = f"{self.name} (half {k + 1} of its classes)"
            out.append(CheckSet(name, m, self.new, self.old, self.fingerprint))
        return out[0], out[1]


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def check_on_set(
    queries: np.ndarray,
    gallery: np.ndarray,
    check_set: CheckSet,
    cfg: CheckConfig,
    *,
    kind: str = "map",
) -> tuple[SetCheck, MapRefusal | None]:
    """M(queries, gallery) against M(old, old) on ``check_set`` as the gate judges ``require:
    cross > self_parent`` with margin ``cfg.min_gain`` at ``cfg.confidence``; returns the
    numbers and, when the map is refused, why (None: kept, or ``cfg.refuse`` off).
    ``queries`` and ``gallery``: the served rows of the set's items (module docstring)."""
    from compat.compare.engine import compare
    from compat.evaluate.manifest import evaluate_manifest, label_codes
    from compat.evaluate.protocols import PROTOCOLS, options_for

    m = check_set.manifest
    proto = PROTOCOLS.create(STREAM, **options_for(STREAM, [METRIC]))
    codes = label_codes(m.labels)
    cells = {
        "served": evaluate_manifest(m, queries, gallery, [proto], codes=codes)[proto.name],
        "old-self": evaluate_manifest(m, check_set.old, check_set.old, [proto], codes=codes)[
            proto.name
        ],
    }
    comparison = compare(
        cells, resamples=cfg.resamples, seed=cfg.seed, stream=STREAM, confidence=cfg.confidence
    )
    diff = comparison.difference("served", "old-self", METRIC, cfg.confidence)
    served, old = cells["served"].metrics[METRIC], cells["old-self"].metrics[METRIC]
    held = SetCheck(
        set=check_set.name,
        fingerprint=check_set.fingerprint,
        metric=METRIC,
        queries=int(cells["served"].counts.get("valid_queries", 0)),
        served=_finite(served),
        old_self=_finite(old),
        difference=_finite(diff.value),
        lower_bound=_finite(diff.lower_bound),
        interval=None if diff.interval is None else [_finite(v) for v in diff.interval],
        confidence=cfg.confidence,
        min_gain=cfg.min_gain,
        resamples=cfg.resamples,
    )
    lower = diff.lower_bound if diff.lower_bound is not None else math.nan
    if not cfg.refuse or lower > cfg.min_gain:
        return held, None
    reason = (
        f"on {check_set.name} (classes no model was trained on), as the gate judges: top-1 "
        f"{served:.4f} served by the {kind} map against {old:.4f} for the old model's self test "
        f"M(old, old): the gain's {cfg.confidence:g} lower bound {lower:+.4f} is not above "
        f"{cfg.min_gain:g} ({held.queries} queries, {cfg.resamples} bootstrap resamples)"
    )
    return held, MapRefusal(
        reason=reason,
        mapped=_finite(served),
        baseline=_finite(old),
        baseline_kind="old-self",
        lower_bound=_finite(lower),
    )


def check_psi(
    psi: Any, old: np.ndarray, new: np.ndarray, held_out: Any, cfg: Any
) -> tuple[SetCheck, MapRefusal | None]:
    """psi (:class:`compat.maps.psi.UpgradeModule`) judged on ``held_out``
    (:class:`compat.maps.psi_fit.HeldOutSet`; ``old``, ``new``: both versions' rows of its items)
    as the gate judges a version served through it (``serve: backfill``): M(new, psi(old))
    against M(old, old), with the rules of its :class:`~compat.maps.psi_config.UpgradeConfig`
    ``cfg`` (confidence, min_gain, refuse). psi's own held-out check asks whether it beats no
    upgrade, M(new, old); for a model with no tie to the old one that bar is near chance, and a
    psi kept by it lost 25 points to keeping the old model (issue 42)."""
    from compat.maps.config import CheckConfig
    from compat.maps.psi import upgrade_array

    check_set = CheckSet(held_out.name, held_out.manifest, new, old, held_out.fingerprint)
    rules = CheckConfig(confidence=cfg.confidence, min_gain=cfg.min_gain, refuse=cfg.refuse)
    return check_on_set(new, upgrade_array(psi, old), check_set, rules, kind="gallery")


__all__ = ["METRIC", "STREAM", "CheckSet", "check_on_set", "check_psi"]
