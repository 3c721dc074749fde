"""The promotion lock and the append-only promotion log.

MLflow aliases have no compare-and-set, so ``compat promote`` holds a file lock around
read-alias, check, set-alias (docs/findings.md: 8 concurrent writers hit an IntegrityError without it).

The log is JSON lines, one fsync'd ``write`` per line. A promotion writes a ``pending`` line
*before* it moves the alias and a ``committed`` line after. A crash between the two leaves a
pending line that the next promotion (under the lock) resolves against the registry: if the alias
points at the pending target it is marked committed, otherwise aborted. So the log never loses a
promotion that happened and never claims one that did not.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compat.errors import BadInputError

LOG_FILE = "promotions.jsonl"
LOCK_FILE = "promote.lock"


def who() -> str:
    """The person or CI job promoting: ``COMPAT_ACTOR``, else user@host."""
    actor = os.environ.get("COMPAT_ACTOR") or os.environ.get("GITHUB_ACTOR")
    if actor:
        return actor
    try:
        user = getpass.getuser()
    except Exception:  # no passwd entry in some containers
        user = str(os.getuid())
    return f"{user}@{socket.gethostname()}"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


@contextlib.contextmanager
def promotion_lock(root: str | os.PathLike[str], timeout: float = 120.0) -> Iterator[None]:
    from filelock import FileLock, Timeout

    from compat.errors import InfrastructureError

    Path(root).mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(Path(root) / LOCK_FILE), timeout=timeout):
            yield
    except Timeout:
        raise InfrastructureError(
            f"{Path(root) / LOCK_FILE}: lock not acquired within {timeout:g} s"
        ) from None


class PromotionLog:
    """Append-only JSON-lines log of promotions."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.path = Path(root) / LOG_FILE

    def append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def lines(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                # A torn last line (crash mid-write) is skipped, never fatal; anything else is.
                if n == len(self.path.read_text(encoding="utf-8").splitlines()):
                    continue
                raise BadInputError(f"{self.path}:{n}: not a JSON line") from None
        return out

    def promotions(self) -> list[dict[str, Any]]:
        """One record per promotion with its final state: committed, aborted or pending."""
        by_id: dict[str, dict[str, Any]] = {}
        for line in self.lines():
            pid = line.get("id")
            if not pid:
                continue
            if line.get("state") == "pending":
                by_id[pid] = dict(line)
            elif pid in by_id:
                by_id[pid]["state"] = line["state"]
                if line.get("recovered"):
                    by_id[pid]["recovered"] = True
        return list(by_id.values())

    def begin(self, **fields: Any) -> str:
        pid = uuid.uuid4().hex
        self.append({"id": pid, "state": "pending", "when": now(), "who": who(), **fields})
        return pid

    def finish(self, pid: str, state: str = "committed", recovered: bool = False) -> None:
        entry: dict[str, Any] = {"id": pid, "state": state, "when": now()}
        if recovered:
            entry["recovered"] = True
        self.append(entry)

    def reconcile(self, production: Callable[[], str | None]) -> list[dict[str, Any]]:
        """Resolve pending promotions left by a crash (call under the promotion lock)."""
        pending = [p for p in self.promotions() if p["state"] == "pending"]
        if not pending:
            return []
        current = production()
        for p in pending:
            state = "committed" if p is pending[-1] and current == p.get("to") else "aborted"
            self.finish(p["id"], state, recovered=True)
            p["state"] = state
        return pending
