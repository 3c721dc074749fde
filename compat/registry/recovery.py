"""What a kill during ``compat promote`` can leave behind, found and repaired.

A promotion writes, in order: a ``pending`` record in the promotion log, the ``production``
alias, a ``committed`` record, then the version's ``compat.status=promoted`` tag (after the
lock is released). A kill (SIGKILL, a lost machine, a CI job cancelled) between any two of
these leaves one of four states; none loses or invents a promotion, but each makes the
registry tell a different story from the log until it is repaired:

============================  ==============================================  ====================
where the kill fell           what is left                                    repair
============================  ==============================================  ====================
inside a log append           a torn last line (local log)                    moved aside
after ``pending``             a pending record, the alias not moved           record aborted
after the alias moved         a pending record whose target is production     record committed,
                                                                              status tag set
after ``committed``           production's ``compat.status`` still            status tag set
                              ``passed`` (the gate's verdict, not the move)
============================  ==============================================  ====================

:func:`findings` names each (read-only: ``compat verify`` reports them, exit 6);
:func:`repair` fixes them under the promotion lock (``compat verify --repair``, and every
promotion before it moves the alias). Drift (the alias moved outside compat) is not a kill's
doing and is never "repaired" by moving production: :mod:`compat.registry.drift` reports it.
"""

from __future__ import annotations

from typing import Any

from compat.registry.promotions import expected_production

PROMOTED = "promoted"
# The status a killed promotion leaves on production: its gate passed, the tag write after the
# logged move never came. Any other status is not a kill's: 'failed' is a verdict a gate
# recorded (before compat kept the status of a version that served), 'candidate' a version
# promoted by hand; verify names neither as a leftover and repair never rewrites them.
GATED = "passed"


def findings(reg: Any, ledger: Any, promotions: list[dict[str, Any]] | None = None) -> list[str]:
    """One line per state a killed promotion left (empty: nothing to repair). Reads only."""
    out: list[str] = []
    torn = ledger.torn()
    if torn:
        out.append(torn)
    promotions = ledger.promotions() if promotions is None else promotions
    production = reg.production()
    pending = [p for p in promotions if p.get("state") == "pending"]
    for p in pending:
        to = p.get("to")
        if p is pending[-1] and production == to:
            out.append(
                f"promotion {p.get('id')} to {to!r} is pending but production points at it "
                "(a kill after the alias moved): repair commits it"
            )
        else:
            out.append(
                f"promotion {p.get('id')} to {to!r} is pending and production is not there "
                "(a kill before the alias moved): repair aborts it"
            )
    if production is not None and not pending and expected_production(promotions) == production:
        status = _status(reg.get(production))
        if status == GATED:  # the gate's verdict before the move; 'failed' is a recorded verdict
            out.append(
                f"production is {production!r} as the log says, but its compat.status is "
                f"{status!r} (a kill after the logged move): repair sets it to {PROMOTED!r}"
            )
    return out


def repair(reg: Any, ledger: Any) -> list[str]:
    """Fix what :func:`findings` reports; call under ``ledger.lock()``. One line per fix."""
    done: list[str] = []
    torn = ledger.repair()
    if torn:
        done.append(torn)
    for p in ledger.reconcile(reg.production):
        # A promotion a kill left pending: committed if the alias moved, else aborted.
        done.append(f"promotion {p.get('id')} to {p.get('to')!r}: {p['state']} (recovered)")
        if p["state"] == "committed" and p.get("to"):
            reg.set_tags(reg.get(p["to"]), {"compat.status": PROMOTED})
    production = reg.production()
    if production is not None and expected_production(ledger.promotions()) == production:
        rec = reg.get(production)
        before = _status(rec)  # read first: set_tags updates the record in place
        if before == GATED:  # never a recorded 'failed' verdict: only the kill's leftover
            reg.set_tags(rec, {"compat.status": PROMOTED})
            done.append(f"{production}: compat.status {before!r} -> {PROMOTED!r}")
    return done


def _status(rec: Any) -> str:
    return rec.tags.get("compat.status", "candidate")  # as VersionRecord.status reads it


__all__ = ["PROMOTED", "findings", "repair"]
