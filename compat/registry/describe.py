"""The registered version's description: the gate's verdict written for people.

MLflow shows it on the version page (rendered as markdown) and ``compat show`` prints it, so
it reads as text in both: a sentence with the verdict, a blank line, one ``- `` line per check and
per update gain, a blank line, the promotion it was written for. Every protocol metric is a
rate in [0, 1] (CMC top-k, mAP, TPIR@FPIR, TAR@FAR; docs/reference.md), so values read as
percentages and differences as percentage points, rounded to one decimal; a missing value reads
``n/a``, never ``None``.
"""

from __future__ import annotations

from typing import Any

from compat.contracts.gate import CriterionResult, Verdict


def percent(x: float | None) -> str:
    """``0.52501`` -> ``52.5%``; None -> ``n/a``."""
    return "n/a" if x is None else f"{100 * x:.1f}%"


def points(x: float | None) -> str:
    """A difference of rates in percentage points: ``0.2`` -> ``+20.0 pts``; None -> ``n/a``."""
    return "n/a" if x is None else f"{100 * x:+.1f} pts"


def check_line(r: CriterionResult) -> str:
    """``- pass: identification top1: M(v2, v1) > M(v1, v1): 52.5% vs 32.5%, +20.0 pts``
    (with the lower bound of the difference when the criterion asks for a confidence level)."""
    mark = {"pass": "pass", "fail": "FAIL", "accepted": "FAIL, loss accepted"}[r.verdict]
    bound = f", lower bound {points(r.lower_bound)}" if r.lower_bound is not None else ""
    role = " (rollback)" if r.role == "rollback" else ""
    return (
        f"- {mark}{role}: {r.description}: {percent(r.lhs_value)} vs {percent(r.rhs_value)}, "
        f"{points(r.difference)}{bound}"
    )


def gain_line(protocol: str, metric: str, gain: dict[str, Any]) -> str:
    """``- update gain, identification top1 (paragon v3-paragon): 33.3%`` (BCT Eq. 9), with why
    it is undefined or not meaningful when it is."""
    head = f"- update gain, {protocol} {metric} (paragon {gain.get('paragon') or 'n/a'}): "
    value = gain.get("value")
    if value is None:
        return head + f"undefined ({gain.get('reason', 'no value')})"
    note = "" if gain.get("meaningful", True) else f" (not meaningful: {gain.get('reason')})"
    return head + percent(value) + note


def describe(verdict: Verdict, against: str | None) -> str:
    """The version's description: verdict, one line per check and per gain, the promotion."""
    status = "PASSED" if verdict.passed else "FAILED"
    if verdict.rollback:
        served = ", ".join(verdict.rollback)
        head = (
            f"{verdict.version} {status} its gate as a rollback from {against} (checked on the "
            f"rows of {served} too)."
        )
    elif verdict.parent is None:
        head = f"{verdict.version} has no parent: it has no compatibility criteria to check."
    else:
        head = f"{verdict.version} {status} its compatibility contract with {verdict.parent}."
    lines = [check_line(r) for r in verdict.results]
    lines += [
        gain_line(p, m, g)
        for p, per in sorted(verdict.gain.items())
        for m, g in sorted(per.items())
    ]
    if verdict.accepted_loss:
        a = verdict.accepted_loss
        lines.append(f"- loss accepted by {a['who']} (--accept-loss): {a['why']}")
    if against:
        tail = f"Promotion requested against {against} (production at the time)."
    else:
        tail = "Promotion requested while no version was production."
    return "\n\n".join(part for part in (head, "\n".join(lines), tail) if part)


__all__ = ["check_line", "describe", "gain_line", "percent", "points"]
