"""Search a partially backfilled (mixed) gallery correctly.

After ``compat backfill --fraction F`` a gallery holds two kinds of rows, told apart by the
bundle's ``row_versions``:

* upgraded rows psi(phi_old(x)), which live in the **new** version's space, and
* raw rows phi_old(x), which live in the **old** version's space.

**Which query embedding scores which rows.** A score q . g is meaningful only when q and g come
from the same space or from a pair of versions trained to be compatible. Per row group:

1. a row made by version g is scored with the query's embedding *by g* if the caller has one;
2. otherwise with the embedding of a version q declared compatible with g (``compatible``
   holds (q, g): q's queries may search g's gallery; a backward-compatible new version v2 of
   v1 declares ("v2", "v1"), which is exactly what the contract gate proved);
3. otherwise the search is refused (:class:`~compat.errors.BadInputError`), never guessed.

So a service that has moved to v2 embeds each query once with v2 and searches the mixed gallery
in one pass. A service still running v1 for queries must embed queries with v2 as well to reach
the upgraded rows (psi is one-way: v1 . psi(v1) is not meaningful).

**Putting two groups' scores on one scale** (``calibration="match"``, the default). Same-space
scores v2 . psi(v1) and cross-model scores v2 . v1 are both meaningful but not distributed
alike (a query's impostor scores against one group sit higher or spread wider than against the
other), so merging raw scores lets one group's impostors outrank the other group's true
matches: measured on the embedded data, top-1 of v2 queries fell from 38.9% (nothing upgraded)
to 32.4% with a quarter of the gallery upgraded by psi before rising to 44.4% at 100%. With
``match``, each query's scores against a group g are mapped onto its score distribution against
the reference group r (mean and standard deviation over the group's rows, per query):

    s' = mu_r(q) + (s - mu_g(q)) * sigma_r(q) / sigma_g(q),
    mu_g(q) = q . m_g,   sigma_g(q)^2 = q^T C_g q

with m_g and C_g the mean and covariance of group g's rows, so the moments are exact and cost
one d x d matrix per group, not a pass over the gallery per query (the same curve became 38.9,
38.0, 40.3, 42.2, 44.4). The order within a group is unchanged (a positive affine map per
query), so top-k per group followed by a merge stays exact. The reference group is the one
scored with its own version's query embedding (the new space), else the largest. A group of
fewer than two rows is left as it is; where a query's spread over a group is zero only the
means are matched. ``calibration="none"`` merges raw scores.

:func:`search_mixed` is exact top-k; :func:`mixed_scores` the full score matrix (the slow
reference the tests compare against); :func:`calibrated_embeddings` writes the ``match`` scores
of a two-group gallery as plain inner products of widened embeddings, so whole-gallery metrics
(:mod:`compat.evaluate.forward`) run unchanged on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from compat.errors import BadInputError

CALIBRATIONS = ("match", "none")
_MIN_ROWS = 2


def version_groups(row_versions: Sequence[str]) -> dict[str, np.ndarray]:
    """Row indices of each version, in order of first appearance."""
    v = np.asarray(row_versions, dtype=np.str_)
    out: dict[str, np.ndarray] = {}
    for name in dict.fromkeys(v.tolist()):
        out[name] = np.flatnonzero(v == name)
    return out


def query_for(
    gallery_version: str,
    queries: Mapping[str, np.ndarray],
    compatible: Iterable[tuple[str, str]] = (),
) -> str:
    """Which query embedding may score rows made by ``gallery_version`` (rule 1, then 2)."""
    if gallery_version in queries:
        return gallery_version
    allowed = {tuple(p) for p in compatible}
    for q in queries:
        if (q, gallery_version) in allowed:
            return q
    have = ", ".join(queries) or "none"
    raise BadInputError(
        f"gallery: row_versions: rows made by {gallery_version!r} cannot be searched with query "
        f"embeddings of {have}: embed the queries with {gallery_version!r} too, or declare a "
        f"compatible (query, {gallery_version!r}) pair"
    )


@dataclass(frozen=True)
class GroupStats:
    """Mean and covariance of a group's rows: the per-query score moments in closed form."""

    mean: np.ndarray  # (d,)
    cov: np.ndarray  # (d, d)

    @classmethod
    def of(cls, rows: np.ndarray) -> GroupStats | None:
        if rows.shape[0] < _MIN_ROWS:
            return None
        x = np.asarray(rows, dtype=np.float64)
        mean = x.mean(axis=0)
        c = x - mean
        return cls(mean, (c.T @ c) / x.shape[0])

    def moments(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(mu, sigma) of q . g over the group's rows, per query row of ``q``."""
        q64 = np.asarray(q, dtype=np.float64)
        var = np.einsum("ij,jk,ik->i", q64, self.cov, q64)
        return q64 @ self.mean, np.sqrt(np.maximum(var, 0.0))


@dataclass
class _Group:
    version: str
    query_version: str
    query: np.ndarray
    rows: np.ndarray


def _plan(
    queries: Mapping[str, np.ndarray],
    gallery: np.ndarray,
    row_versions: Sequence[str],
    compatible: Iterable[tuple[str, str]],
) -> list[_Group]:
    if len(row_versions) != gallery.shape[0]:
        raise BadInputError(
            f"gallery: row_versions: {len(row_versions)} entries for {gallery.shape[0]} rows"
        )
    if not queries:
        raise BadInputError("queries: no query embeddings given")
    nq = {q.shape[0] for q in queries.values()}
    if len(nq) != 1:
        raise BadInputError(f"queries: versions disagree on the number of queries: {sorted(nq)}")
    compatible = list(compatible)
    plan = []
    for g, rows in version_groups(row_versions).items():
        qv = query_for(g, queries, compatible)
        q = queries[qv]
        if q.shape[1] != gallery.shape[1]:
            raise BadInputError(
                f"queries: {q.shape[1]}-dim query embeddings cannot score {gallery.shape[1]}-dim "
                f"rows made by {g!r}"
            )
        plan.append(_Group(g, qv, np.ascontiguousarray(q, dtype=np.float32), rows))
    return plan


def _reference(plan: list[_Group], reference: str | None) -> _Group:
    if reference is not None:
        for grp in plan:
            if grp.version == reference:
                return grp
        raise BadInputError(f"calibration: reference version {reference!r} has no rows")
    native = [grp for grp in plan if grp.version == grp.query_version]
    return native[0] if native else max(plan, key=lambda grp: len(grp.rows))


def _maps(
    plan: list[_Group], gallery: np.ndarray, calibration: str, reference: str | None
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per group (except the reference): per-query (mu_g, mu_r, ratio) of the ``match`` map."""
    if calibration not in CALIBRATIONS:
        raise BadInputError(f"calibration: unknown {calibration!r}; known: {CALIBRATIONS}")
    if calibration == "none" or len(plan) < 2:
        return {}
    ref = _reference(plan, reference)
    ref_stats = GroupStats.of(gallery[ref.rows])
    if ref_stats is None:
        return {}
    mu_r, sd_r = ref_stats.moments(ref.query)
    out = {}
    for grp in plan:
        stats = None if grp is ref else GroupStats.of(gallery[grp.rows])
        if stats is None:
            continue
        mu_g, sd_g = stats.moments(grp.query)
        ok = (sd_g > 1e-12) & (sd_r > 1e-12)
        ratio = np.where(ok, sd_r / np.where(ok, sd_g, 1.0), 1.0)
        out[grp.version] = (mu_g, mu_r, ratio)
    return out


def _apply(s: np.ndarray, m: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    mu_g, mu_r, ratio = m
    return (mu_r[:, None] + (s - mu_g[:, None]) * ratio[:, None]).astype(np.float32)


def mixed_scores(
    queries: Mapping[str, np.ndarray],
    gallery: np.ndarray,
    row_versions: Sequence[str],
    compatible: Iterable[tuple[str, str]] = (),
    *,
    calibration: str = "match",
    reference: str | None = None,
) -> np.ndarray:
    """(nq, n_gallery) scores, each row group scored with its query embedding and, with
    ``calibration="match"``, mapped onto the reference group's per-query score distribution."""
    g = np.ascontiguousarray(gallery, dtype=np.float32)
    plan = _plan(queries, g, row_versions, compatible)
    maps = _maps(plan, g, calibration, reference)
    out = np.empty((plan[0].query.shape[0], g.shape[0]), dtype=np.float32)
    for grp in plan:
        s = grp.query @ g[grp.rows].T
        out[:, grp.rows] = _apply(s, maps[grp.version]) if grp.version in maps else s
    return out


def search_mixed(
    queries: Mapping[str, np.ndarray],
    gallery: np.ndarray,
    row_versions: Sequence[str],
    k: int,
    *,
    compatible: Iterable[tuple[str, str]] = (),
    calibration: str = "match",
    reference: str | None = None,
    device: str | None = "cpu",
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` over a mixed gallery: ``(scores (nq, k), gallery row indices (nq, k))``.

    ``queries`` maps a version to its (nq, d) embeddings of the same queries (rows aligned).
    Each row group is searched with :func:`compat.embeddings.search.search`, its top-k scores
    calibrated (the map keeps the order within a group), and the lists merged by score.
    """
    from compat.embeddings.search import search

    g = np.ascontiguousarray(gallery, dtype=np.float32)
    if not 1 <= k <= g.shape[0]:
        raise BadInputError(f"k={k} must be between 1 and the gallery size {g.shape[0]}")
    plan = _plan(queries, g, row_versions, compatible)
    maps = _maps(plan, g, calibration, reference)
    scores, index = [], []
    for grp in plan:
        s, i = search(grp.query, g[grp.rows], min(k, len(grp.rows)), device=device)
        scores.append(_apply(s, maps[grp.version]) if grp.version in maps else s)
        index.append(grp.rows[i])
    s_all, i_all = np.concatenate(scores, axis=1), np.concatenate(index, axis=1)
    # Merge: stable sort by decreasing score; equal scores keep group order.
    top = np.argsort(-s_all, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(s_all, top, 1), np.take_along_axis(i_all, top, 1)


def calibrated_embeddings(
    query: np.ndarray,
    rows: np.ndarray,
    is_reference: np.ndarray,
    stats_rows: np.ndarray | None = None,
    stats: tuple[GroupStats | None, GroupStats | None] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The ``match`` scores of a two-group gallery as inner products of (n, 2d) embeddings.

    ``rows`` (n, d) hold both groups, ``is_reference`` (n,) marks the reference group's rows
    (scored with ``query`` in the same space); the group moments are computed over the rows
    flagged in ``stats_rows`` (default: all), e.g. the gallery items of an evaluation set whose
    other items only take part in verification pairs. ``stats`` = (reference, other) gives the
    moments instead: e.g. both spaces measured on the *same* items (psi(old) and old rows of the
    whole gallery), so a psi that changes nothing (the identity) changes no score, where two
    disjoint random groups would differ by sampling alone. With q' = [q, r(q) q] and
    g' = [g, 0] (reference) or [m_r, g - m_o] (other), r = sigma_r / sigma_o:

        q' . g' = q . g                               for reference rows,
        q' . g' = mu_r(q) + (q . g - mu_o(q)) r(q)    for the other rows, as in mixed_scores.

    Without two groups of at least two rows each the scores are left raw (zero padding).
    """
    q = np.asarray(query, dtype=np.float32)
    g = np.asarray(rows, dtype=np.float32)
    ref = np.asarray(is_reference, dtype=bool)
    use = np.ones(len(g), bool) if stats_rows is None else np.asarray(stats_rows, dtype=bool)
    d = g.shape[1]
    if stats is None:
        ref_stats, other_stats = GroupStats.of(g[use & ref]), GroupStats.of(g[use & ~ref])
    else:
        ref_stats, other_stats = stats
    if min((ref & use).sum(), (~ref & use).sum()) < _MIN_ROWS:
        ref_stats = other_stats = None  # one group (almost) empty: raw scores, as documented
    q_out = np.zeros((q.shape[0], 2 * d), dtype=np.float32)
    g_out = np.zeros((g.shape[0], 2 * d), dtype=np.float32)
    q_out[:, :d] = q
    g_out[ref, :d] = g[ref]
    if ref_stats is None or other_stats is None:
        g_out[~ref, :d] = g[~ref]
        return q_out, g_out
    ratio = _spread_ratio(ref_stats, other_stats, q, q)
    # Where a query's spread is degenerate it keeps raw scores: q' = [q, q], g' = [0, g].
    q_out[:, d:] = (ratio[:, None] * q).astype(np.float32)
    g_out[~ref, :d] = ref_stats.mean.astype(np.float32)
    g_out[~ref, d:] = (g[~ref] - other_stats.mean).astype(np.float32)
    return q_out, g_out


def _spread_ratio(
    ref_stats: GroupStats, other_stats: GroupStats, q_ref: np.ndarray, q_other: np.ndarray
) -> np.ndarray:
    """sigma_r(q_ref) / sigma_o(q_other) per query; 1 where either spread is degenerate."""
    _, sd_r = ref_stats.moments(q_ref)
    _, sd_o = other_stats.moments(q_other)
    ok = (sd_o > 1e-12) & (sd_r > 1e-12)
    return np.where(ok, sd_r / np.where(ok, sd_o, 1.0), 1.0)


def calibrated_two_spaces(
    q_ref: np.ndarray,
    q_other: np.ndarray,
    ref_rows: np.ndarray,
    other_rows: np.ndarray,
    is_reference: np.ndarray,
    stats: tuple[GroupStats | None, GroupStats | None],
) -> tuple[np.ndarray, np.ndarray]:
    """The ``match`` scores of a gallery whose two row groups live in two spaces, each scored
    with its own query embedding, as inner products of (n, d_r + d_o) embeddings.

    Row i is ``ref_rows[i]`` (width d_r, scored with ``q_ref``) where ``is_reference[i]``, else
    ``other_rows[i]`` (width d_o, scored with ``q_other``): e.g. a gallery being upgraded by psi
    (upgraded rows psi(old) in the new space, scored with the new model's queries) while the
    rows not yet upgraded are searched by the same queries mapped into the old space by a query
    adapter. ``stats`` = (reference, other) moments, each in its own space (both measured on the
    same items, so the calibration does not depend on which rows happen to be upgraded). With
    q' = [q_ref, r q_other], g' = [g, 0] (reference) or [m_r, g - m_o] (other) and
    r = sigma_r(q_ref) / sigma_o(q_other), the scores are those of :func:`calibrated_embeddings`
    with each group scored by its own query:

        q' . g' = q_ref . g                                          reference rows,
        q' . g' = mu_r(q_ref) + (q_other . g - mu_o(q_other)) r      other rows.

    Without both moments the other rows' scores are left raw (q' = [q_ref, q_other],
    g' = [0, g]).
    """
    qr = np.asarray(q_ref, dtype=np.float32)
    qo = np.asarray(q_other, dtype=np.float32)
    gr = np.asarray(ref_rows, dtype=np.float32)
    go = np.asarray(other_rows, dtype=np.float32)
    ref = np.asarray(is_reference, dtype=bool)
    if len(qr) != len(qo) or len(gr) != len(go) or len(ref) != len(gr):
        raise ValueError(
            f"calibrated_two_spaces: {len(qr)} and {len(qo)} queries, {len(gr)} and {len(go)} "
            f"rows, {len(ref)} flags: the two spaces must hold the same queries and rows"
        )
    dr = gr.shape[1]
    q_out = np.zeros((len(qr), dr + go.shape[1]), dtype=np.float32)
    g_out = np.zeros((len(gr), dr + go.shape[1]), dtype=np.float32)
    q_out[:, :dr] = qr
    g_out[ref, :dr] = gr[ref]
    ref_stats, other_stats = stats
    if ref_stats is None or other_stats is None:
        q_out[:, dr:] = qo
        g_out[~ref, dr:] = go[~ref]
        return q_out, g_out
    ratio = _spread_ratio(ref_stats, other_stats, qr, qo)
    q_out[:, dr:] = (ratio[:, None] * qo).astype(np.float32)
    g_out[~ref, :dr] = ref_stats.mean.astype(np.float32)
    g_out[~ref, dr:] = (go[~ref] - other_stats.mean).astype(np.float32)
    return q_out, g_out


__all__ = [
    "CALIBRATIONS",
    "GroupStats",
    "calibrated_embeddings",
    "calibrated_two_spaces",
    "mixed_scores",
    "query_for",
    "search_mixed",
    "version_groups",
]
