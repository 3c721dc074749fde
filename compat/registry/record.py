"""A gate verdict written onto the registered version: status and per-criterion tags, a
one-paragraph description, and the full JSON report as a run artifact."""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path
from typing import Any

from compat.contracts.gate import Verdict
from compat.registry.store import Registry, VersionRecord, tag_key


def seal(report: dict[str, Any]) -> bytes:
    """The report's JSON bytes (sorted keys, indent 2); sets ``report_sha256`` to their digest."""
    blob = json.dumps(report, sort_keys=True, indent=2).encode()
    report["report_sha256"] = hashlib.sha256(blob).hexdigest()
    return blob


def describe(verdict: Verdict, against: str | None) -> str:
    """The version's description: the verdict, each criterion's values, the update gain."""
    status = "PASSED" if verdict.passed else "FAILED"
    parts = [f"{verdict.version} {status} its compatibility contract against {verdict.parent}"]
    for r in verdict.results:
        mark = "ok" if r.passed else "FAIL"
        bound = f", lower bound {r.lower_bound:.4f}" if r.lower_bound is not None else ""
        diff = "n/a" if r.difference is None else f"{r.difference:+.4f}"
        parts.append(f"[{mark}] {r.description}: {r.lhs_value} vs {r.rhs_value} ({diff}{bound})")
    for p, per in verdict.gain.items():
        for m, g in per.items():
            if g.get("value") is not None:
                parts.append(f"update gain {p} {m} vs {g['paragon']}: {g['value']:.1%}")
    if against:
        parts.append(f"promotion requested against {against}")
    return "; ".join(parts) + "."


def verdict_tags(verdict: Verdict, when: str) -> dict[str, str]:
    """``compat.status``, ``compat.verdict.at``, one ``compat.check.*`` per criterion and the
    first update gain per protocol."""
    tags = {"compat.status": "passed" if verdict.passed else "failed", "compat.verdict.at": when}
    for r in verdict.results:
        # A forward criterion (M(new, psi(parent))) gets its own key beside the backward one.
        forward = ("forward",) if "forward" in r.require.split(" > ") else ()
        key = tag_key("compat.check", r.gallery, r.protocol, r.metric, *forward)
        tags[key] = (
            f"{'pass' if r.passed else 'fail'} {r.difference:+.4f}"
            if r.difference is not None
            else "fail n/a"
        )
    for p, per in verdict.gain.items():
        values = [g["value"] for g in per.values() if g.get("value") is not None]
        if values:
            tags[f"compat.gain.{p}"] = f"{values[0]:.4f}"
    return tags


def record_verdict(
    reg: Registry, rec: VersionRecord, verdict: Verdict, report: dict[str, Any], blob: bytes
) -> None:
    """Tags, description and the JSON report artifact (``blob``) on the registered version."""
    reg.set_tags(rec, verdict_tags(verdict, report["when"]))
    reg.set_description(rec, describe(verdict, report.get("against")))
    if rec.run_id:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"promote-{report['when'].replace(':', '').replace('.', '')}.json"
            path.write_bytes(blob)
            reg.call("log_artifact", rec.run_id, str(path), "reports")


__all__ = ["describe", "record_verdict", "seal", "verdict_tags"]
