"""``compat chain``: a version's lineage and the recorded verdict of every (version, ancestor) pair.

Every version in the lineage is paired with each of its ancestors: an edge (the parent) or a
transitive pair. A pair's checks are the check objects the gate recorded on the newer version (its
``compat.checks`` tag, typed: :func:`compat.registry.tags.checks_from_tags`), the same fields
``compat promote`` prints; a pair with no check is flagged ``never checked``, because a
gallery made by that ancestor may still be served.
"""

from __future__ import annotations

from typing import Any

from compat.errors import NotFoundError
from compat.registry.store import Registry
from compat.registry.tags import checks_from_tags, serve_from_tags


def lineage(reg: Registry, version: str | None = None) -> dict[str, Any]:
    if version is None:
        version = reg.production()
        if version is None:
            raise NotFoundError("no version given and no production version set")
    chain = [version]
    seen = {version}
    records = {version: reg.get(version)}
    while (parent := records[chain[-1]].parent) is not None:
        if parent in seen:
            raise NotFoundError(f"lineage of {version} loops at {parent}")
        rec = reg.find(parent)
        if rec is None:
            chain.append(parent)  # named as parent but not registered: show it, stop there
            break
        records[parent] = rec
        chain.append(parent)
        seen.add(parent)
    pairs = []
    for i, q in enumerate(chain):
        if q not in records:
            continue
        tags = records[q].tags
        for j, g in enumerate(chain[i + 1 :], start=i + 1):
            checks = [c for c in checks_from_tags(tags, g, q) if c.get("role") != "rollback"]
            if not checks:
                verdict = "never checked"
            else:
                verdict = "pass" if all(c["verdict"] == "pass" for c in checks) else "fail"
            pairs.append(
                {
                    "query": q,
                    "gallery": g,
                    "kind": "edge" if j == i + 1 else "transitive",
                    # how the newer version was served against its parent's gallery
                    "serve": serve_from_tags(tags) if j == i + 1 else "native",
                    "verdict": verdict,
                    "checks": checks,
                }
            )
    production = reg.production()
    return {"version": version, "lineage": chain, "production": production, "pairs": pairs}
