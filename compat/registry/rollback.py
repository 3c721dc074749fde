"""Rollbacks: when a promotion is one, whose rows it must serve, and the losses it accepts.

Promoting V while production is P rolls production back when P is not one of V's registered
ancestors (V is older than P, or unrelated to it): the gallery may hold rows P embedded, and
every version the log put in production after V last served, which V's own contract never
measured. The gate then also judges V on those rows (:meth:`compat.contracts.schema.Contract.
rollback_criteria`): by default M(V, S) against M(V, V) for each served version S, what the
service delivers after the rollback on S's rows against what V delivered on its own (the
forward-compatibility direction of BCT, Shen et al. CVPR 2020, Sec. 3).

Every loss a gate accepts is written down: a negative ``margin`` in the contract (named in the
output with its key), or ``compat promote --accept-loss WHY``, which accepts the failed
rollback checks as measured and is recorded in the promotion log with who and why. A failed
rollback check the flag did not accept comes with the key to write and a margin that would
have held (:func:`loss_hints`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from compat.contracts.gate import CriterionResult, Verdict
from compat.contracts.schema import Contract
from compat.errors import BadInputError
from compat.registry.promotions import who


def rolls_back(ancestors: list[str], version: str, against: str | None) -> bool:
    """Whether making ``version`` production while it points at ``against`` is a rollback:
    ``against`` is set, is not ``version`` and is none of its ``ancestors``."""
    return against is not None and against != version and against not in ancestors


def served_since(promotions: list[dict[str, Any]], version: str) -> list[str]:
    """The versions the log put in production after ``version`` last served (its rows may be
    in the gallery); none when ``version`` never served."""
    last = None
    for i, p in enumerate(promotions):
        if p.get("state") == "committed" and p.get("to") == version:
            last = i
    if last is None:
        return []
    later = [p.get("to") for p in promotions[last + 1 :] if p.get("state") == "committed"]
    return [v for v in dict.fromkeys(later) if v and v != version]


def rollback_galleries(
    contract: Contract,
    production: str,
    promotions: list[dict[str, Any]],
    where: str | Path = "contract",
) -> list[str]:
    """Whose rows a rollback to ``contract.version`` must serve, production first: the
    contract's ``rollback.serve`` (which must list production: BadInputError naming the key
    otherwise), else production and every version the log put in production after this one
    last served; versions the contract checks anyway (parent, transitive) are left to its own
    criteria."""
    declared = contract.rollback.serve if contract.rollback is not None else None
    if declared is not None and production not in declared:
        raise BadInputError(
            f"{where}: rollback.serve: lists {', '.join(declared)} but not {production}, "
            f"production now, whose rows the gallery holds: add {production} to rollback.serve "
            f"(or drop it: production and every version served since {contract.version} last "
            "was)"
        )
    wanted = list(declared) if declared is not None else served_since(promotions, contract.version)
    covered = {contract.version, contract.parent, *contract.transitive}
    return [v for v in dict.fromkeys([production, *wanted]) if v not in covered]


def accept_losses(verdict: Verdict, why: str) -> dict[str, Any] | None:
    """``--accept-loss WHY``: every failed rollback check is accepted as measured; the
    verdict passes if nothing else failed. Returns what the promotion log records (who, why
    and the accepted checks), None when no rollback check failed."""
    failed = [r for r in verdict.results if r.role == "rollback" and not r.passed]
    if not failed:
        return None
    for r in failed:
        r.accepted = True
    verdict.passed = all(r.holds for r in verdict.results)
    verdict.accepted_loss = {
        "who": who(),
        "why": why,
        "checks": [
            {"gallery": r.gallery, "protocol": r.protocol, "metric": r.metric,
             "require": r.require, "difference": r.difference, "lower_bound": r.lower_bound}
            for r in failed
        ],
    }  # fmt: skip
    return verdict.accepted_loss


def points(x: float | None) -> str:
    """A difference of rates in percentage points (``-0.096`` -> ``-9.6 pts``)."""
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def _what(r: CriterionResult) -> str:
    rows = f"{r.gallery}'s rows" + (" (rollback)" if r.role == "rollback" else "")
    return f"{r.protocol} {r.metric}, {r.require}, on {rows}"


def accepted_losses(
    verdict: Verdict, contract_path: str | Path, accepted: dict[str, Any] | None
) -> list[str]:
    """One line per loss the verdict accepts: each check whose contract margin is negative
    (its key named), and each rollback check accepted by ``--accept-loss`` (who and why)."""
    lines = []
    for r in verdict.results:
        if r.margin < 0:
            lines.append(
                f"accepted loss: {_what(r)}: up to {points(-r.margin)[1:]} "
                f"({contract_path} {r.key}.margin: {r.margin:g}); measured {points(r.difference)}"
            )
    if accepted is not None:
        for r in verdict.results:
            if r.accepted:
                lines.append(
                    f"accepted loss: {_what(r)}: measured {points(r.difference)}, accepted by "
                    f"{accepted['who']} with --accept-loss: {accepted['why']}"
                )
    return lines


def margin_that_holds(r: CriterionResult) -> float | None:
    """A margin (two decimals) under which the check would have held: below its difference
    and, with a confidence level, below its lower bound (the comparison is strict)."""
    values = [x for x in (r.difference, r.lower_bound) if x is not None and math.isfinite(x)]
    if r.difference is None or not values:
        return None
    x = min(values)
    m = math.floor(x * 100) / 100
    if m >= x:
        m -= 0.01
    return round(max(m, -1.0), 2)


def loss_hints(contract: Contract, contract_path: str | Path, verdict: Verdict) -> list[str]:
    """For the rollback checks that failed (and were not accepted): which key of the contract
    to write, with a margin that would have held, or the flag that accepts the loss as
    measured. Writing ``rollback.criteria`` replaces the default criteria, so for a contract
    without it the hint lists every rollback criterion."""
    failed = [r for r in verdict.results if r.role == "rollback" and not r.holds]
    if not failed:
        return []
    flag = "or re-run with --accept-loss 'WHY' (the loss as measured; logged with who and why)"
    declared = contract.rollback is not None and contract.rollback.criteria is not None
    if declared:
        lines = []
        for r in failed:
            m = margin_that_holds(r)
            if m is not None:
                lines.append(
                    f"to accept the loss on {r.gallery}'s rows ({r.protocol} {r.metric}: "
                    f"{points(r.difference)}), write {r.key}.margin: {m:g} in {contract_path}, "
                    + flag
                )
        return lines
    need: dict[tuple[str, str], float] = {}
    for r in failed:
        m = margin_that_holds(r)
        if m is not None:
            key = (r.protocol, r.metric)
            need[key] = min(need.get(key, m), m)
    items = []
    for c in contract.rollback_criteria():
        margin = need.get((c.protocol, c.metric))
        extra = f", margin: {margin:g}" if margin is not None else ""
        items.append(f"{{protocol: {c.protocol}, metric: {c.metric}, require: {c.require}{extra}}}")
    return [
        f"to accept the loss on {', '.join(dict.fromkeys(r.gallery for r in failed))}'s rows, "
        f"write in {contract_path}: rollback: {{criteria: [{', '.join(items)}]}} (every "
        f"rollback criterion: writing the key replaces the default), " + flag
    ]


__all__ = [
    "accept_losses",
    "accepted_losses",
    "loss_hints",
    "margin_that_holds",
    "rollback_galleries",
    "rolls_back",
    "served_since",
]
