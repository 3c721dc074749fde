"""Drift: the ``production`` alias disagrees with the promotion log.

Only ``compat promote`` is meant to move ``production``, and it logs every move. Anyone with
write access to the MLflow registry can still move the alias by hand (MLflow's UI, "Promote
model" or the alias pencil), with no gate and no log entry. The log's last committed move names
where production should be; when the alias says otherwise, ``compat versions``, ``show``,
``chain``, ``log`` and ``promote`` warn and ``compat verify`` exits 6 naming both. ``verify``
also reports what a killed promotion left (:mod:`compat.registry.recovery`), and ``--repair``
fixes that.
"""

from __future__ import annotations

from typing import Any

from compat.errors import ConflictError
from compat.registry import recovery
from compat.registry.promotions import expected_production
from compat.registry.uris import mask


class DriftError(ConflictError):
    """The production alias is not where the promotion log's last committed move put it;
    ``result`` is what :func:`verify` found."""

    def __init__(self, message: str, result: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.result = result or {}


def drift(actual: str | None, promotions: list[dict[str, Any]]) -> str | None:
    """A one-line message if the alias (``actual``) disagrees with the log, else None.

    A pending last promotion whose target is the alias is a crash between moving the alias and
    logging it (the next promotion recovers it), not drift.
    """
    expected = expected_production(promotions)
    if actual == expected:
        return None
    pending = [p for p in promotions if p.get("state") == "pending"]
    if pending and pending[-1].get("to") == actual:
        return None
    where = "unset" if actual is None else repr(actual)
    logged = "no committed move" if expected is None else f"its last committed move to {expected!r}"
    return (
        f"drift: production is {where} in the registry but the promotion log shows {logged}; "
        "it was moved outside compat promote (MLflow's UI?)"
    )


def verify(reg: Any, repair: bool = False) -> dict[str, Any]:
    """Compare the alias with the log, and look for what a killed promotion left
    (:mod:`compat.registry.recovery`); raises DriftError (exit 6) naming both on disagreement,
    or naming each state left behind. ``repair``: fix those states first, under the promotion
    lock (drift is never repaired: production moves only through the gate)."""
    ledger = reg.ledger()
    repaired: list[str] = []
    if repair:
        with ledger.lock():
            repaired = recovery.repair(reg, ledger)
    promotions = ledger.promotions()
    actual = reg.production()
    message = drift(actual, promotions)
    problems = recovery.findings(reg, ledger, promotions)
    from compat.registry.gallery import describe, last_gallery
    from compat.registry.gallery import problems as gallery_problems

    record = last_gallery(promotions, actual)[0] if message is None else None
    moved = gallery_problems(promotions, actual) if record is not None else []
    result = {
        "production": actual,
        "logged": expected_production(promotions),
        "log": ledger.where,
        "registry": mask(reg.uri),
        "drift": message is not None,
        "problems": problems,
        "repaired": repaired,
        "gallery": moved,  # what no longer matches the gallery production's promotion recorded
        "gallery_record": describe(record) if record is not None else None,
    }
    if message is not None:
        raise DriftError(message, result)
    if problems:
        raise DriftError(
            f"{len(problems)} state(s) a killed promotion left: {'; '.join(problems)}; "
            "run compat verify --repair",
            result,
        )
    if moved:
        raise DriftError(f"{len(moved)} gallery problem(s): {'; '.join(moved)}", result)
    return result


__all__ = ["DriftError", "drift", "verify"]
