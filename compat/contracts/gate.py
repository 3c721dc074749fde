"""The gate's verdict: does a version keep every promise of its contract?

For each criterion and each served gallery (the parent, then every ``transitive`` ancestor) the
two matrix cells named by ``require`` are measured on the evaluation set with the same queries,
and the criterion holds when their difference exceeds the margin (BCT, Shen et al. CVPR 2020,
Eq. 2: M(new, old) > M(old, old)), and, with ``confidence``, when the one-sided lower bound of a
paired bootstrap over queries does too. The update gain against the paragon is BCT Eq. 9.

The verdict is a formatter over the comparison engine (:func:`compat.compare.engine.compare`):
one paired bootstrap per protocol over every required cell. Each protocol is built with the
options that cover every metric the contract asks for
(:func:`compat.contracts.schema.protocol_options`). A metric's reported intervals are at the
confidence its criteria ask for (the highest, if they differ; 0.95 when none does).

A criterion with the ``forward`` term compares M(new, psi(parent)): the caller passes the
parent's evaluation-set embeddings upgraded by the version's psi (``upgraded[parent]``), and
the cell is named ``(new, "psi(<parent>)")`` in the matrix. It is checked against the parent
only (psi maps the parent's embeddings, not older ones).

A version wider (or narrower) than an ancestor meets its gallery as the contract's
``dim_mismatch`` says (:func:`compat.embeddings.dims.align_pair`; BCT: the first d_old
coordinates of the new embedding, re-normalised); without it such a cell is an error.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from compat.compare.engine import DEFAULT_CONFIDENCE, Comparison, compare, num, num_pair
from compat.contracts.schema import Contract, Criterion, adapter_name, protocol_options
from compat.errors import BadInputError

ROLES = ("parent", "transitive", "rollback")


@dataclass
class CriterionResult:
    """One check: a criterion judged against one gallery. ``role`` says why that gallery is
    checked: the ``parent``, a ``transitive`` ancestor, or a version whose rows a
    ``rollback`` must serve. ``gain`` is the update gain of the pair (BCT Eq. 9) against the
    paragon for a ``cross > self_parent`` check, with whether it means anything."""

    protocol: str
    metric: str
    require: str
    gallery: str
    lhs: list[str]
    rhs: list[str]
    lhs_value: float | None
    rhs_value: float | None
    difference: float | None
    margin: float
    confidence: float | None
    lower_bound: float | None
    passed: bool
    description: str
    role: str = "parent"
    gain: float | None = None
    gain_meaningful: bool | None = None
    # the contract key the criterion comes from (``criteria.0``, ``rollback.criteria.1``, or
    # ``rollback.criteria`` for the default rollback criterion); ``accepted``: a failed
    # rollback check whose loss ``compat promote --accept-loss`` accepted (who and why logged)
    key: str = ""
    accepted: bool = False

    @property
    def verdict(self) -> str:
        """``pass``, ``fail``, or ``accepted`` (a failed rollback check whose loss was accepted)."""
        return "pass" if self.passed else ("accepted" if self.accepted else "fail")

    @property
    def holds(self) -> bool:
        """Whether the check lets the gate pass: it passed, or its loss was accepted."""
        return self.passed or self.accepted

    def to_check(self) -> dict[str, Any]:
        """The check object every command prints and every ``--json`` carries (README,
        "Output for CI and scripts"): the same fields wherever a check appears."""
        return check_object(asdict(self))

    def failure(self) -> str:
        """Why the check failed, in one phrase: ``identification top1 vs v1: lower bound
        -0.0036 <= margin 0.5``."""
        what = f"{self.protocol} {self.metric} vs {self.gallery}"
        if self.difference is None:
            return f"{what}: undefined"
        if self.difference <= self.margin:
            return f"{what}: difference {self.difference:+.4f} <= margin {self.margin:g}"
        bound = "n/a" if self.lower_bound is None else f"{self.lower_bound:+.4f}"
        return f"{what}: lower bound {bound} <= margin {self.margin:g}"


CHECK_FIELDS = (
    "protocol", "metric", "gallery", "role", "require", "margin", "confidence", "new",
    "baseline", "difference", "lower_bound", "gain", "gain_meaningful", "verdict",
)  # fmt: skip


def check_object(result: dict[str, Any]) -> dict[str, Any]:
    """A :class:`CriterionResult` (as a dict, e.g. from a stored report) as the check object:
    :data:`CHECK_FIELDS`, ``new``/``baseline`` being the two cells' values."""
    return {
        "protocol": result["protocol"],
        "metric": result["metric"],
        "gallery": result["gallery"],
        "role": result.get("role", "parent"),
        "require": result.get("require"),
        "margin": result.get("margin"),
        "confidence": result.get("confidence"),
        "new": result.get("lhs_value"),
        "baseline": result.get("rhs_value"),
        "difference": result.get("difference"),
        "lower_bound": result.get("lower_bound"),
        "gain": result.get("gain"),
        "gain_meaningful": result.get("gain_meaningful"),
        "verdict": "pass"
        if result.get("passed")
        else ("accepted" if result.get("accepted") else "fail"),
    }


@dataclass
class Verdict:
    version: str
    parent: str | None
    passed: bool
    results: list[CriterionResult] = field(default_factory=list)
    matrix: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, Any] = field(default_factory=dict)
    gain: dict[str, Any] = field(default_factory=dict)
    rollback: list[str] = field(default_factory=list)  # the served versions a rollback checked
    # how the version meets its parent's gallery: {"mode": native|query-adapter|backfill} and,
    # for a map, what the caller records of it (path, kind, sha256, fit data fingerprint)
    serve: dict[str, Any] = field(default_factory=lambda: {"mode": "native"})
    # a rollback's losses accepted with --accept-loss: {who, why, checks} (logged as such)
    accepted_loss: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def failed(self) -> list[CriterionResult]:
        """The checks that did not pass (a loss accepted by ``--accept-loss`` included)."""
        return [r for r in self.results if not r.passed]

    def checks(self) -> list[dict[str, Any]]:
        return [r.to_check() for r in self.results]


@dataclass(frozen=True)
class DeclaredFacts:
    """What a registered version says about itself that its contract declares too."""

    parent: str | None
    dim: int
    head: str | None


def check_facts(contract: Contract, facts: DeclaredFacts, where: str) -> None:
    """The contract's declared facts must match the registered version's (BadInputError
    otherwise); an unrecorded head is not a contradiction."""
    problems = []
    if facts.parent != contract.parent:
        problems.append(f"parent: contract says {contract.parent!r}, card says {facts.parent!r}")
    if facts.dim != contract.embedding_dim:
        problems.append(
            f"embedding_dim: contract says {contract.embedding_dim}, card says {facts.dim}"
        )
    if facts.head and facts.head != contract.head:
        problems.append(f"head: contract says {contract.head!r}, card says {facts.head!r}")
    if problems:
        raise BadInputError(
            f"{where}: contract contradicts the registered card: " + "; ".join(problems)
        )


def psi_gallery(version: str) -> str:
    """The name of ``version``'s gallery upgraded by psi, as a matrix column: ``psi(v1)``."""
    from compat.evaluate.forward import psi_name

    return psi_name(version)


def required_cells(
    contract: Contract, paragon: str | None, rollback: list[str] | tuple[str, ...] = ()
) -> list[tuple[str, str]]:
    """Every (query version, gallery version) cell the verdict needs (``rollback``: the
    versions whose rows a rollback must serve)."""
    new = contract.version
    cells: list[tuple[str, str]] = []
    served = [contract.parent, *contract.transitive] if contract.parent else []
    for g in [*served, *rollback]:
        mode = _gallery_mode(contract, g, g in rollback)
        for c in [_term_cell("cross", new, g, mode), (g, g)]:
            if c not in cells:
                cells.append(c)
    criteria = list(contract.criteria) + (contract.rollback_criteria() if rollback else [])
    if any("self" in c.terms for c in criteria) and (new, new) not in cells:
        cells.append((new, new))
    if any(c.uses_forward for c in contract.criteria):
        assert contract.parent is not None
        cells.append((new, psi_gallery(contract.parent)))
    if paragon and contract.parent and (paragon, paragon) not in cells:
        cells.append((paragon, paragon))
    return cells


def _gallery_mode(contract: Contract, gallery: str, rollback: bool) -> str:
    """How the version's queries meet ``gallery``: the parent's as the contract serves it; a
    rollback's served rows through the query adapter or blend when the contract serves through
    one (it is part of the version's query path, whatever gallery it searches); any other
    gallery natively (psi maps the parent's rows only)."""
    mode = contract.serve.mode
    if rollback:
        return mode if mode in ("query-adapter", "query-blend") else "native"
    return mode if gallery == contract.parent else "native"


def _term_cell(term: str, new: str, gallery: str, serve: str = "native") -> tuple[str, str]:
    """The cell a criterion's term names; ``cross`` follows the served configuration."""
    cross = {
        "native": (new, gallery),
        "query-adapter": (adapter_name(new), gallery),
        "query-blend": (adapter_name(new, serve), gallery),
        "backfill": (new, psi_gallery(gallery)),
    }[serve]
    return {
        "cross": cross,
        "self_parent": (gallery, gallery),
        "self": (new, new),
        "forward": (new, psi_gallery(gallery)),
    }[term]


def check_galleries(contract: Contract, lineage: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The parent, then the transitive ancestors nearest first (their place in ``lineage``,
    the version's registered ancestors; one it does not list after, in the contract's order)."""
    assert contract.parent is not None
    rank = {v: i for i, v in enumerate(lineage)}
    older = sorted(contract.transitive, key=lambda v: rank.get(v, len(rank)))  # stable
    return [contract.parent, *older]


def galleries_of(contract: Contract, criterion: Criterion) -> list[str]:
    """The served galleries a criterion is checked against (forward: the parent only)."""
    assert contract.parent is not None
    if criterion.uses_forward:
        return [contract.parent]
    return [contract.parent, *contract.transitive]


def judge(
    contract: Contract,
    manifest: Any,
    embeddings: dict[str, np.ndarray],
    *,
    paragon: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
    chunk_size: int | None = None,
    device: str | None = None,
    upgraded: dict[str, np.ndarray] | None = None,
    adapted: np.ndarray | None = None,
    rollback: list[str] | tuple[str, ...] = (),
    lineage: list[str] | tuple[str, ...] = (),
) -> Verdict:
    """Evaluate every criterion of ``contract`` against the parent and each transitive ancestor.

    ``upgraded[parent]``: the parent's embeddings upgraded by psi into the new version's space;
    required when a criterion uses ``forward`` or the contract serves by ``backfill``.
    ``adapted``: the version's evaluation-set embeddings mapped into the parent's space by its
    query adapter (``cross``: M(adapt(new), parent)) or blend (M(blend(new), parent)), required
    when the contract serves by one of those. ``rollback``: the versions whose rows a
    rollback to this version must serve; each is checked on the contract's rollback criteria
    (:meth:`~compat.contracts.schema.Contract.rollback_criteria`) in the parent's place, its
    queries adapted (or blended) when the contract serves through a query adapter (or blend).

    The checks come in one order, the one ``show`` and ``chain`` print too: gallery by gallery
    (the parent, the transitive ancestors nearest first as ``lineage`` lists the version's
    ancestors, then the rollback's served versions), each gallery's in the order of the
    contract's criteria.

    A gain is ``meaningful`` only when every check of the version against its parent passed
    (the reason names the failed ones) and it is at most 100%
    (:func:`compat.compare.matrix.update_gain`)."""
    from compat.embeddings.dims import align_pair
    from compat.evaluate.manifest import evaluate_manifest, label_codes
    from compat.evaluate.protocols import PROTOCOLS

    new = contract.version
    for v, emb in embeddings.items():
        if emb.shape[1] != contract.embedding_dim and v == new:
            raise BadInputError(
                f"{new}: embeddings: dimension {emb.shape[1]}, contract declares {contract.embedding_dim}"
            )
    mode = contract.serve.mode
    if any(c.uses_forward for c in contract.criteria) or mode == "backfill":
        assert contract.parent is not None
        ups = upgraded or {}
        if contract.parent not in ups:
            why = "the contract serves by backfill" if mode == "backfill" else "a criterion uses"
            raise BadInputError(
                f"{new}: {why} forward = M({new}, psi({contract.parent})), but no "
                f"upgrade module output for {contract.parent}'s gallery was given"
            )
        embeddings = {**embeddings, psi_gallery(contract.parent): ups[contract.parent]}
    if mode in ("query-adapter", "query-blend"):
        assert contract.parent is not None
        parent_rows, row = embeddings[contract.parent], adapter_name(new, mode)
        if adapted is None:
            raise BadInputError(
                f"{new}: the contract serves by {mode} = M({row}, "
                f"{contract.parent}), but no adapted query rows were given"
            )
        if adapted.shape != (len(embeddings[new]), parent_rows.shape[1]):
            raise BadInputError(
                f"{row}: shape {adapted.shape}, but {new} has "
                f"{len(embeddings[new])} rows and {contract.parent}'s are {parent_rows.shape[1]}-dim"
            )
        embeddings = {**embeddings, row: adapted}
    rollback = [g for g in dict.fromkeys(rollback) if g != new]
    back_criteria = contract.rollback_criteria() if rollback else []
    try:
        options = protocol_options([*contract.criteria, *back_criteria])
    except ValueError as err:
        raise BadInputError(f"{new}: criteria: {err}") from None
    protocols = [PROTOCOLS.create(name, **opts) for name, opts in options.items()]
    codes = label_codes(manifest.labels)
    cells = required_cells(contract, paragon, rollback)
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for q, g in cells:
        eq, eg = embeddings[q], embeddings[g]
        if eq.shape[1] != eg.shape[1]:
            if contract.dim_mismatch is None:
                raise BadInputError(
                    f"embeddings of {q} ({eq.shape[1]} dims) and {g} ({eg.shape[1]} dims) cannot "
                    f"be compared: declare dim_mismatch (truncate or pad) in {new}'s contract"
                )
            eq, eg = align_pair(eq, eg, contract.dim_mismatch)
        results[(q, g)] = evaluate_manifest(
            manifest, eq, eg, protocols, chunk_size=chunk_size, device=device, codes=codes
        )

    comparisons = {
        p.name: compare(
            {c: r[p.name] for c, r in results.items()},
            resamples=resamples,
            seed=seed,
            stream=p.name,
        )
        for p in protocols
    }
    confidence = _interval_confidence(contract)
    verdict = Verdict(version=new, parent=contract.parent, passed=True, serve={"mode": mode})
    for (q, g), per_protocol in results.items():
        for pname, res in per_protocol.items():
            for metric, value in res.metrics.items():
                verdict.matrix.setdefault(pname, {}).setdefault(metric, {}).setdefault(q, {})[g] = (
                    num(value)
                )
                if resamples > 0:
                    interval = comparisons[pname].interval(
                        (q, g), metric, confidence.get((pname, metric), DEFAULT_CONFIDENCE)
                    )
                    verdict.intervals.setdefault(pname, {}).setdefault(metric, {}).setdefault(
                        q, {}
                    )[g] = num_pair(interval)

    for gallery in check_galleries(contract, lineage):
        role = "parent" if gallery == contract.parent else "transitive"
        for i, criterion in enumerate(contract.criteria):
            if gallery in galleries_of(contract, criterion):
                verdict.results.append(
                    _check(criterion, new, gallery, comparisons, resamples, role,
                           _gallery_mode(contract, gallery, False), f"criteria.{i}")
                )  # fmt: skip
    for gallery in rollback:
        for i, criterion in enumerate(back_criteria):
            verdict.results.append(
                _check(criterion, new, gallery, comparisons, resamples, "rollback",
                       _gallery_mode(contract, gallery, True), contract.rollback_key(i))
            )  # fmt: skip
    verdict.rollback = rollback
    verdict.passed = all(r.holds for r in verdict.results)

    if paragon and contract.parent is not None:
        # BCT defines the gain for a compatible update: any failed check of the pair (the
        # version against its parent) makes it not meaningful, whatever its point value says.
        failed = [
            r.failure() for r in verdict.results if r.gallery == contract.parent and not r.passed
        ]
        for criterion in contract.criteria:
            p, m = criterion.protocol, criterion.metric
            gain = comparisons[p].gain(
                _term_cell("cross", new, contract.parent, mode),
                (contract.parent, contract.parent), (paragon, paragon), m, interval=False,
            ).gain  # fmt: skip
            if failed and gain.value is not None:
                gain = gain.not_meaningful("check failed: " + "; ".join(failed))
            verdict.gain.setdefault(p, {})[m] = {"paragon": paragon, **gain.to_json()}
        for r in verdict.results:
            _attach_gain(
                r, comparisons[r.protocol], new, paragon, verdict.gain, contract.parent,
                verdict.results,
            )  # fmt: skip
    return verdict


def _attach_gain(
    r: CriterionResult,
    comparison: Comparison,
    new: str,
    paragon: str,
    gains: dict[str, Any],
    parent: str,
    results: list[CriterionResult],
) -> None:
    """The update gain of a ``cross > self_parent`` check's pair against the paragon (BCT
    Eq. 9; for the parent, the verdict's gain; for an older gallery, that pair's own)."""
    if r.require != "cross > self_parent" or r.role == "rollback":
        return
    if r.gallery == parent:
        g = gains[r.protocol][r.metric]
        r.gain, r.gain_meaningful = (
            g["value"],
            bool(g["meaningful"]) if g["value"] is not None else None,
        )
        return
    gain = comparison.gain((new, r.gallery), (r.gallery, r.gallery), (paragon, paragon), r.metric,
                           interval=False).gain  # fmt: skip
    # as for the parent: any failed check of this pair (new on that gallery, any metric)
    failed = [x.failure() for x in results if x.gallery == r.gallery and x.role == r.role
              and not x.passed]  # fmt: skip
    if gain.value is not None and failed:
        gain = gain.not_meaningful("check failed: " + "; ".join(failed))
    r.gain = gain.value
    r.gain_meaningful = gain.meaningful if gain.value is not None else None


def _interval_confidence(contract: Contract) -> dict[tuple[str, str], float]:
    """(protocol, metric) -> the level of its reported intervals: the highest confidence a
    criterion on that metric asks for (metrics no criterion bounds keep the default)."""
    out: dict[tuple[str, str], float] = {}
    for c in contract.criteria:
        if c.confidence is not None:
            key = (c.protocol, c.metric)
            out[key] = max(out.get(key, c.confidence), c.confidence)
    return out


def _check(
    criterion: Criterion,
    new: str,
    gallery: str,
    comparisons: dict[str, Comparison],
    resamples: int,
    role: str = "parent",
    serve: str = "native",
    key: str = "",
) -> CriterionResult:
    p, m = criterion.protocol, criterion.metric
    lhs_term, rhs_term = criterion.terms
    lhs, rhs = _term_cell(lhs_term, new, gallery, serve), _term_cell(rhs_term, new, gallery, serve)
    comparison = comparisons[p]
    if m not in comparison.metrics(lhs):
        known = ", ".join(sorted(comparison.metrics(lhs)))
        raise BadInputError(
            f"criterion {p} {m}: the protocol reports no such metric; known: {known}"
        )
    if criterion.confidence is not None and resamples <= 0:
        raise BadInputError(f"criterion {p} {m}: confidence needs bootstrap resamples > 0")
    # BCT Eq. 2 with a margin: M(lhs) - M(rhs) > margin, and its one-sided lower bound too.
    diff = comparison.difference(lhs, rhs, m, criterion.confidence)
    passed = bool(not math.isnan(diff.value) and diff.value > criterion.margin)  # strict
    bound = None
    if criterion.confidence is not None:
        bound = diff.lower_bound
        passed = passed and bound is not None and not math.isnan(bound) and bound > criterion.margin
    return CriterionResult(
        protocol=p,
        metric=m,
        require=criterion.require,
        gallery=gallery,
        lhs=list(lhs),
        rhs=list(rhs),
        lhs_value=num(comparison.value(lhs, m)),
        rhs_value=num(comparison.value(rhs, m)),
        difference=num(diff.value),
        margin=criterion.margin,
        confidence=criterion.confidence,
        lower_bound=None if bound is None else num(bound),
        passed=passed,
        description=criterion.describe(new, gallery, serve),
        role=role,
        key=key,
    )
