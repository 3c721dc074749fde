"""Evaluation protocols, built by name: ``identification``, ``open-set``, ``verification``.

A protocol turns query embeddings (made by version q) and gallery embeddings (made by version
g) into the metrics of one compatibility-matrix cell M(q, g), plus per-unit statistics that the
bootstrap resamples (:meth:`ProtocolResult.resample`): per query for identification, per probe
for open-set, per pair for verification.

* ``identification`` (closed-set 1:N): CMC top-1/5/10, mAP, mAP@100. Queries whose identity
  has no gallery item are skipped. ``gallery="instance"`` (default) searches every gallery
  embedding; ``gallery="template"`` searches one template per class, the mean of the class's
  gallery embeddings re-normalised to unit length
  (:func:`compat.evaluate.ranking.template_gallery`; the template-based 1:N protocol of the
  d-Simplex/HOC paper's evaluation and of BCT's IJB-C protocols).
* ``open-set`` (1:N with non-mated probes): TPIR at FPIR 0.1 and 0.01. A probe is *mated* when
  its identity has a gallery item, *non-mated* otherwise.
* ``verification`` (1:1): TAR at FAR 0.1, 0.01, 0.001 over pairs (a, b) where a is embedded by
  the query version and b by the gallery version.

Two ways in:

* :func:`compat.evaluate.manifest.evaluate_manifest` for the pipeline's evaluation set
  (``splits/eval.json``): query and gallery are the manifest's index lists, verification uses
  the manifest's pairs.
* :func:`evaluate_sets` here for two arbitrary labelled sets (``compat score``). Verification
  pairs are then formed from the labels by :func:`compat.evaluate.pairs.label_pairs`
  (documented there).

Both rank each query's gallery once (:func:`compat.evaluate.ranking.ranking`) and share the
ranking between identification and open-set. :func:`evaluate_sets` lives here, beside the
protocols it dispatches over, because :meth:`Protocol.evaluate` is a call to it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from compat.catalog import Catalog
from compat.evaluate import metrics as M
from compat.evaluate.pairs import DEFAULT_MAX_PAIRS, indexed_pair_scores, label_pairs
from compat.evaluate.ranking import ranking, template_gallery

GALLERIES = ("instance", "template")  # what identification searches: every item, or per class


class ProtocolResult(ABC):
    """Metrics of one cell plus the per-unit statistics needed to recompute them on resamples."""

    protocol: str
    metrics: dict[str, float]
    counts: dict[str, int]
    curves: dict[str, list[float]]

    @property
    @abstractmethod
    def units(self) -> int:
        """How many resampling units (queries, probes or pairs) the metrics average over."""

    @abstractmethod
    def resample(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Every metric recomputed for each row of ``weights`` (b, units) of unit multiplicities."""


@dataclass
class IdentificationResult(ProtocolResult):
    stats: M.RankStats
    ks: tuple[int, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)
    protocol: str = "identification"

    @property
    def units(self) -> int:
        return len(self.stats)

    def resample(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        st = self.stats
        names = [*(M.top_key(k) for k in self.ks), "mAP", M.map_at_key(st.k)]
        # One (units x metrics) matrix, so all metrics cost a single matrix product.
        columns = [st.valid & (st.first_rank <= k) for k in self.ks]
        columns += [np.nan_to_num(st.ap), np.nan_to_num(st.ap_at_k), st.valid]
        sums = np.asarray(weights, dtype=np.float64) @ np.stack(columns, axis=1).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            values = sums[:, :-1] / sums[:, -1:]
        return {name: values[:, i] for i, name in enumerate(names)}


@dataclass
class OpenSetResult(ProtocolResult):
    top_score: np.ndarray  # (n,) best gallery score of each probe
    correct: np.ndarray  # (n,) rank-1 item has the probe's identity
    mated: np.ndarray  # (n,) the probe's identity is in the gallery
    fpirs: tuple[float, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)
    protocol: str = "open-set"

    @property
    def units(self) -> int:
        return int(self.top_score.shape[0])

    def resample(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        from compat.evaluate.metrics import weighted_rates_above

        values = weighted_rates_above(
            self.top_score, self.correct & self.mated, self.mated, ~self.mated, weights, self.fpirs
        )
        return {M.tpir_key(f): values[f] for f in self.fpirs}


@dataclass
class VerificationResult(ProtocolResult):
    scores: np.ndarray  # (m,) pair scores
    same: np.ndarray  # (m,) genuine pair
    fars: tuple[float, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    curves: dict[str, list[float]] = field(default_factory=dict)
    protocol: str = "verification"

    @property
    def units(self) -> int:
        return int(self.scores.shape[0])

    def resample(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        from compat.evaluate.metrics import weighted_rates_above

        values = weighted_rates_above(
            self.scores, self.same, self.same, ~self.same, weights, self.fars
        )
        return {M.tar_key(f): values[f] for f in self.fars}


class Protocol(ABC):
    """One evaluation procedure; instances are built by name from :data:`PROTOCOLS`."""

    name: ClassVar[str]
    uses_ranking: ClassVar[bool] = False

    @abstractmethod
    def metric_names(self) -> list[str]: ...

    @classmethod
    def options_for(cls, metrics: Iterable[str]) -> dict[str, Any]:
        """Constructor options under which the protocol reports every metric of ``metrics``
        (canonical names, :func:`~compat.evaluate.metrics.canonical_metric`) besides its
        default ones; ValueError naming the first metric it cannot compute."""
        raise NotImplementedError

    def from_ranking(self, stats: M.RankStats) -> ProtocolResult:
        raise NotImplementedError(f"{self.name} does not work from a gallery ranking")

    def evaluate(
        self,
        query: np.ndarray,
        query_labels: np.ndarray,
        gallery: np.ndarray,
        gallery_labels: np.ndarray,
        *,
        exclude: np.ndarray | None = None,
        chunk_size: int | None = None,
        device: str | None = None,
    ) -> ProtocolResult:
        """Evaluate two labelled sets (query version, gallery version)."""
        return evaluate_sets(
            [self],
            query,
            query_labels,
            gallery,
            gallery_labels,
            exclude=exclude,
            chunk_size=chunk_size,
            device=device,
        )[self.name]


PROTOCOLS: Catalog[Protocol] = Catalog("protocol")

_TOP_K = re.compile(r"^top([1-9][0-9]*)$")
_MAP_AT = re.compile(r"^mAP@([1-9][0-9]*)$")


def _rates(
    protocol: str, prefix: str, metrics: Iterable[str], defaults: Sequence[float]
) -> tuple[float, ...]:
    """The default rates plus each ``<prefix>=<rate>`` of ``metrics``, highest first."""
    rates = set(defaults)
    for metric in metrics:
        name, _, rate = metric.partition("=")
        if name != prefix or M.canonical_metric(metric) != metric:
            raise ValueError(
                f"unknown metric {metric!r} for {protocol}; it reports {prefix}=<rate>"
            )
        rates.add(float(rate))
    return tuple(sorted(rates, reverse=True))


@PROTOCOLS.register("identification")
class Identification(Protocol):
    """Closed-set 1:N search: CMC top-k, mAP over the whole gallery, mAP@k (GLDv2)."""

    name = "identification"
    uses_ranking = True

    def __init__(
        self,
        ks: Sequence[int] = M.TOP_KS,
        map_k: int = M.MAP_K,
        cmc_ranks: int = 20,
        gallery: str = "instance",
    ) -> None:
        self.ks = tuple(int(k) for k in ks)
        self.map_k = int(map_k)
        self.cmc_ranks = int(cmc_ranks)
        if gallery not in GALLERIES:
            raise ValueError(f"gallery must be one of {', '.join(GALLERIES)}, got {gallery!r}")
        self.gallery = gallery

    def metric_names(self) -> list[str]:
        return [*(M.top_key(k) for k in self.ks), "mAP", M.map_at_key(self.map_k)]

    @classmethod
    def options_for(cls, metrics: Iterable[str]) -> dict[str, Any]:
        ks, map_ks = set(M.TOP_KS), []
        for metric in metrics:
            if top := _TOP_K.match(metric):
                ks.add(int(top[1]))
            elif at := _MAP_AT.match(metric):
                if int(at[1]) not in map_ks:
                    map_ks.append(int(at[1]))
            elif metric != "mAP":
                raise ValueError(
                    f"unknown metric {metric!r} for {cls.name}; it reports top<k>, mAP, mAP@<k>"
                )
        if len(map_ks) > 1:
            # One ranking is truncated at one k: mAP@k for two k would need two evaluations.
            raise ValueError(f"{cls.name} reports mAP@k for one k, not for {map_ks}")
        return {"ks": tuple(sorted(ks)), "map_k": map_ks[0] if map_ks else M.MAP_K}

    def from_ranking(self, stats: M.RankStats) -> IdentificationResult:
        return IdentificationResult(
            stats=stats,
            ks=self.ks,
            metrics=M.identification_metrics(stats, self.ks),
            counts={"queries": len(stats), "valid_queries": int(stats.valid.sum())},
            curves={"cmc": M.cmc_from_ranks(stats.first_rank, self.cmc_ranks).tolist()},
        )


@PROTOCOLS.register("open-set")
class OpenSet(Protocol):
    """Open-set 1:N: TPIR at FPIR; non-mated probes (identity not in the gallery) set the bar."""

    name = "open-set"
    uses_ranking = True

    def __init__(self, fpirs: Sequence[float] = M.FPIRS) -> None:
        self.fpirs = tuple(float(f) for f in fpirs)

    def metric_names(self) -> list[str]:
        return [M.tpir_key(f) for f in self.fpirs]

    @classmethod
    def options_for(cls, metrics: Iterable[str]) -> dict[str, Any]:
        return {"fpirs": _rates(cls.name, "tpir@fpir", metrics, M.FPIRS)}

    def from_ranking(self, stats: M.RankStats) -> OpenSetResult:
        correct = stats.first_rank == 1
        mated = stats.valid
        return OpenSetResult(
            top_score=stats.top_score,
            correct=correct,
            mated=mated,
            fpirs=self.fpirs,
            metrics={
                M.tpir_key(f): M.tpir_at_fpir(stats.top_score, correct, mated, f)
                for f in self.fpirs
            },
            counts={"mated": int(mated.sum()), "non_mated": int((~mated).sum())},
        )


@PROTOCOLS.register("verification")
class Verification(Protocol):
    """1:1 verification: TAR at FAR, ROC from scikit-learn (no interpolation)."""

    name = "verification"

    def __init__(
        self,
        fars: Sequence[float] = M.FARS,
        max_pairs: int = DEFAULT_MAX_PAIRS,
        seed: int = 0,
    ) -> None:
        self.fars = tuple(float(f) for f in fars)
        self.max_pairs = int(max_pairs)
        self.seed = int(seed)

    def metric_names(self) -> list[str]:
        return [M.tar_key(f) for f in self.fars]

    @classmethod
    def options_for(cls, metrics: Iterable[str]) -> dict[str, Any]:
        return {"fars": _rates(cls.name, "tar@far", metrics, M.FARS)}

    def from_pair_scores(self, scores: np.ndarray, same: np.ndarray) -> VerificationResult:
        s = np.asarray(scores, dtype=np.float64)
        y = np.asarray(same, dtype=bool)
        return VerificationResult(
            scores=s,
            same=y,
            fars=self.fars,
            metrics={M.tar_key(f): M.tar_at_far(s, y, f) for f in self.fars},
            counts={"genuine_pairs": int(y.sum()), "impostor_pairs": int((~y).sum())},
        )

    def evaluate_pairs(
        self,
        first: np.ndarray,
        second: np.ndarray,
        first_index: np.ndarray,
        second_index: np.ndarray,
        same: np.ndarray,
    ) -> VerificationResult:
        """Pairs (first[first_index[i]], second[second_index[i]]) with genuine flags ``same``."""
        return self.from_pair_scores(
            indexed_pair_scores(first, second, first_index, second_index), same
        )


def protocol_names() -> list[str]:
    """Every protocol of the catalog, in the order reports list them."""
    return PROTOCOLS.names()


def options_for(protocol: str, metrics: Iterable[str]) -> dict[str, Any]:
    """Options that make ``protocol`` report ``metrics`` (UsageError: unknown protocol;
    ValueError: a metric it cannot compute), e.g. ``tar@far=0.0001`` adds that FAR."""
    return PROTOCOLS.get(protocol).options_for(metrics)  # type: ignore[attr-defined]


def create_protocols(names: Iterable[str], **options: Any) -> list[Protocol]:
    """Build protocols by name; ``options`` go to each constructor that accepts them."""
    import inspect

    out = []
    for name in names:
        factory = PROTOCOLS.get(name)
        accepted = inspect.signature(factory).parameters
        out.append(factory(**{k: v for k, v in options.items() if k in accepted}))
    return out


def evaluate_sets(
    protocols: Sequence[Protocol],
    query: np.ndarray,
    query_labels: np.ndarray,
    gallery: np.ndarray,
    gallery_labels: np.ndarray,
    *,
    exclude: np.ndarray | None = None,
    chunk_size: int | None = None,
    device: str | None = None,
) -> dict[str, ProtocolResult]:
    """Run ``protocols`` on two labelled sets; identification and open-set share one ranking.

    ``exclude[i]`` is the gallery row that holds query ``i``'s own item (-1: none); it is left
    out of the ranking and out of verification pairs (leave-one-out by index).
    """
    out: dict[str, ProtocolResult] = {}
    stats = None
    for p in protocols:
        if isinstance(p, Identification) and p.gallery == "template":
            if exclude is not None and (np.asarray(exclude) >= 0).any():
                raise ValueError(
                    "identification with a template gallery needs queries that are not "
                    "gallery items (a query would be part of its own class template)"
                )
            templates, template_labels = template_gallery(gallery, gallery_labels)
            out[p.name] = p.from_ranking(
                ranking(
                    query,
                    query_labels,
                    templates,
                    template_labels,
                    map_k=p.map_k,
                    chunk_size=chunk_size,
                    device=device,
                )
            )
        elif p.uses_ranking:
            if stats is None:
                map_k = next(
                    (
                        q.map_k
                        for q in protocols
                        if isinstance(q, Identification) and q.gallery == "instance"
                    ),
                    100,
                )
                stats = ranking(
                    query,
                    query_labels,
                    gallery,
                    gallery_labels,
                    exclude=exclude,
                    map_k=map_k,
                    chunk_size=chunk_size,
                    device=device,
                )
            out[p.name] = p.from_ranking(stats)
        elif isinstance(p, Verification):
            qi, gi, same = label_pairs(
                query_labels, gallery_labels, exclude=exclude, max_pairs=p.max_pairs, seed=p.seed
            )
            out[p.name] = p.evaluate_pairs(query, gallery, qi, gi, same)
        else:  # pragma: no cover - a new protocol kind must say how it evaluates
            raise TypeError(f"protocol {p.name!r} has no evaluation path")
    return out
