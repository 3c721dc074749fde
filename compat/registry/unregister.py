"""``compat unregister VERSION --why TEXT``: undo a registration without the MLflow UI.

A registration made by mistake (a candidate registered from the wrong weights, a pull request's
dry run that registered before compat's CI stopped doing so) blocks its name: registering other
weights under it is refused (exit 4, both digests named). Unregistering deletes the registered
model version, so the name can be registered again; the version's run stays (it is the
training's record) with the tag ``compat.unregistered`` saying when, by whom and why, and the
promotion log gets one record of kind ``unregister`` (who, when, why, the MLflow version and
weights digest that were deleted), which ``compat log`` shows.

The registry's history is never rewritten: a version that is or was production (its status
says so, or the log holds a committed move to it) is refused, as is one another registered
version names as its parent (its gate would lose its baseline); both exit 6 naming why.
Everything happens under the promotion lock, so no promotion or registration of the name runs
meanwhile.
"""

from __future__ import annotations

import uuid
from typing import Any

from compat.errors import ConflictError, UsageError
from compat.registry.promotions import now, who
from compat.registry.store import Registry, VersionRecord, check_version_name

KIND = "unregister"
STATE = "unregistered"
RUN_TAG = "compat.unregistered"


def refusal(reg: Registry, rec: VersionRecord, promotions: list[dict[str, Any]]) -> str | None:
    """Why ``rec`` may not be unregistered (None: it may)."""
    served = rec.status == "promoted" or "production" in rec.aliases
    served = served or any(
        p.get("state") == "committed" and p.get("to") == rec.name for p in promotions
    )
    if served:
        return (
            f"{rec.name} is or was production: its registration is part of the registry's "
            "history (roll back or promote another version instead)"
        )
    children = [r.name for r in reg.versions() if r.parent == rec.name]
    if len(children) == 1:
        return f"{children[0]} names {rec.name} as its parent: unregister it first"
    if children:
        return f"{', '.join(children)} name {rec.name} as their parent: unregister them first"
    return None


def unregister(reg: Registry, version: str, why: str) -> dict[str, Any]:
    """Delete ``version``'s registered model version and log it; returns the log record.
    ConflictError (exit 6) for a version that is or was production or is another's parent,
    UsageError (exit 2) without a reason, NotFoundError (exit 3) when it is not registered."""
    check_version_name(version)
    if not why.strip():
        raise UsageError("--why: say why the registration is undone (it is logged)")
    log = reg.ledger()
    with log.lock():
        rec = reg.get(version)
        reason = refusal(reg, rec, log.promotions())
        if reason:
            raise ConflictError(f"unregister {version}: refused: {reason}")
        entry = {
            "id": uuid.uuid4().hex,
            "kind": KIND,
            "state": STATE,
            "when": now(),
            "who": who(),
            "version": version,
            "mlflow_version": rec.mlflow_version,
            "weights_sha256": rec.tags.get("compat.weights_sha256", ""),
            "run_id": rec.run_id,
            "why": why,
        }
        if rec.run_id:  # the run keeps the story even if the log write below fails
            reg.call("set_tag", rec.run_id, RUN_TAG, f"{entry['when']} by {entry['who']}: {why}")
        reg.delete_version(rec)
        log.append(entry)
    return entry


__all__ = ["KIND", "RUN_TAG", "STATE", "refusal", "unregister"]
