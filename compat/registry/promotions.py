"""The promotion lock and the append-only promotion log (a "ledger").

MLflow aliases have no compare-and-set, so ``compat promote`` holds a lock around read-alias,
check, set-alias (docs/findings.md: 8 concurrent writers hit an IntegrityError without it).

A promotion writes a ``pending`` record *before* it moves the alias and a ``committed`` record
after. A crash between the two leaves a pending record that the next promotion (under the lock)
resolves against the registry: if the alias points at the pending target it is marked
committed (and the version's ``compat.status`` tag set to ``promoted``), otherwise aborted. So
the log never loses a promotion that happened and never claims one that did not.

Two storages share that logic (:class:`Ledger`: one typed record,
:class:`compat.registry.log_line.LogLine`, its replay and its pending/committed composition):
:class:`PromotionLog`, JSON lines in ``registry/promotions.jsonl`` under a file lock (the
embedded sqlite store, or one machine), and :class:`compat.registry.shared.PostgresLedger`, a
table and an advisory lock in the PostgreSQL database behind a shared ``mlflow server``
(docs/design.md, Registry conventions). A line of either that does not parse is exit 4 naming
the file and line, or the table and row.
:func:`expected_production` reads where the log says production is, which
:mod:`compat.registry.drift` and :mod:`compat.registry.recovery` compare the alias with.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import json
import os
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from compat.errors import BadInputError, InfrastructureError, NotFoundError
from compat.io import storage_errors
from compat.registry.log_line import LogLine, new_line, parse_line

LOG_FILE = "promotions.jsonl"
LOCK_FILE = "promote.lock"
TORN_SUFFIX = ".torn"


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


def replay(lines: list[LogLine]) -> list[dict[str, Any]]:
    """One record per promotion with its final state (committed, aborted or pending), and each
    one-line record (:data:`compat.registry.log_line.ONE_LINE_KINDS`) as written; as JSON
    objects (what ``compat log --json`` prints), built from lines already typed."""
    by_id: dict[str, dict[str, Any]] = {}
    for line in lines:
        if line.opens and (line.state == "pending" or line.id not in by_id):
            by_id[line.id] = line.as_json()
        elif line.id in by_id:
            by_id[line.id]["state"] = line.state
            if line.recovered:
                by_id[line.id]["recovered"] = True
    return list(by_id.values())


def expected_production(promotions: list[dict[str, Any]]) -> str | None:
    """Where the log says production is: the target of its last committed move (None: unset)."""
    committed = [p for p in promotions if p.get("state") == "committed"]
    return committed[-1].get("to") if committed else None


class Ledger:
    """The lock and the log of one registry. The record, its states and their replay are here,
    once, for both storages: every line read back is parsed through
    :class:`~compat.registry.log_line.LogLine` (:meth:`lines`) and every line written is
    validated by it first (:meth:`append`); a storage (a JSON-lines file, a PostgreSQL table)
    only keeps the lines (:meth:`_raw_lines`, :meth:`_write`) and serialises writers
    (:meth:`lock`)."""

    where: str = ""

    def lock(self, timeout: float = 120.0) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def _raw_lines(self) -> list[tuple[str, Any]]:
        """(where, decoded JSON value) of every stored line, in order."""
        raise NotImplementedError

    def _write(self, entry: dict[str, Any]) -> None:
        """Store one line (already validated)."""
        raise NotImplementedError

    def records(self) -> list[LogLine]:
        """Every line, typed; BadInputError (exit 4) naming the first that does not parse."""
        return [parse_line(raw, where) for where, raw in self._raw_lines()]

    def lines(self) -> list[dict[str, Any]]:
        """Every line as written (JSON objects), each parsed first (:meth:`records`)."""
        return [record.as_json() for record in self.records()]

    def append(self, entry: dict[str, Any]) -> None:
        """Write ``entry`` as one line, validated as a reader will read it."""
        self._write(new_line(f"{self.where} (new line)", **entry).as_json())

    def repair(self) -> str | None:
        """Make the log safe to append to (call under the lock); a message if anything was done."""
        return None

    def torn(self) -> str | None:
        """What :meth:`repair` would move aside (a torn last line), without touching it."""
        return None

    def promotions(self) -> list[dict[str, Any]]:
        """One record per promotion (:func:`replay`) of the typed lines."""
        return replay(self.records())

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
        """Resolve pending promotions left by a crash (call under the lock); returns them."""
        pending = [p for p in self.promotions() if p["state"] == "pending"]
        if not pending:
            return []
        current = production()
        for p in pending:
            state = "committed" if p is pending[-1] and current == p.get("to") else "aborted"
            self.finish(p["id"], state, recovered=True)
            p["state"] = state
        return pending


class PromotionLog(Ledger):
    """Append-only JSON-lines log in ``<root>/promotions.jsonl``, under a file lock.

    A crash mid-append leaves a torn last line (no newline). Reading skips it; the next write,
    under the lock, repairs it (a complete JSON object that only lacks its newline) or moves it
    aside to ``promotions.jsonl.torn`` and truncates the log to its last whole line, so a new
    line is never glued to a torn one.
    """

    def __init__(self, root: str | os.PathLike[str], unshared: str | None = None) -> None:
        self.root = Path(root)
        self.path = self.root / LOG_FILE
        self.where = str(self.path)
        self.unshared = unshared  # why this file lock would not serialise the registry's writers

    @contextlib.contextmanager
    def lock(self, timeout: float = 120.0) -> Iterator[None]:
        if self.unshared:  # reads go on; a write that needs the lock is refused (exit 3)
            raise NotFoundError(self.unshared)
        with promotion_lock(self.root, timeout):
            yield

    def _split(self) -> tuple[list[bytes], bytes]:
        """Whole lines (newline-terminated) and the torn tail after the last newline."""
        if not self.path.exists():
            return [], b""
        if not self.path.is_file():
            raise BadInputError(f"{self.path}: not a file (the promotion log is a JSON-lines file)")
        data = self.path.read_bytes()
        cut = data.rfind(b"\n") + 1
        return data[:cut].splitlines(), data[cut:]

    def _raw_lines(self) -> list[tuple[str, Any]]:
        whole, tail = self._split()
        out = []
        for n, line in enumerate(whole, start=1):
            if not line.strip():
                continue
            try:
                out.append((f"{self.path}:{n}", json.loads(line)))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise BadInputError(f"{self.path}:{n}: not a JSON line") from None
        complete = _complete(tail)
        if complete is not None:  # whole record, only its newline lost
            out.append((f"{self.path}:{len(whole) + 1}", complete))
        return out

    def torn(self) -> str | None:
        tail = self._split()[1]
        if not tail or _complete(tail) is not None:
            return None
        return (
            f"{self.path}: a torn last line ({len(tail)} bytes, a kill mid-write): repair moves "
            f"it to {self.path.name}{TORN_SUFFIX}"
        )

    def repair(self) -> str | None:
        whole, tail = self._split()
        if not tail:
            return None
        if _complete(tail) is not None:
            with open(self.path, "ab") as f:
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
            return None
        aside = self.path.with_name(self.path.name + TORN_SUFFIX)
        with open(aside, "ab") as f:  # kept aside, never lost: one torn tail per line
            f.write(tail.rstrip(b"\r") + b"\n")
            f.flush()
            os.fsync(f.fileno())
        with open(self.path, "r+b") as f:
            f.truncate(sum(len(line) + 1 for line in whole))
            f.flush()
            os.fsync(f.fileno())
        return (
            f"{self.path}: a torn last line ({len(tail)} bytes, a crash mid-write) was moved "
            f"to {aside}"
        )

    def _write(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True) + "\n").encode("utf-8")
        # A full disk, spent quota or read-only file system: one line (exit 5). A line cut
        # short by it is a torn line, which the next write under the lock repairs.
        with storage_errors(self.path, need=len(line)):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.repair()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, line)
                if written != len(line):  # a short write is ENOSPC by another name
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(fd)
            finally:
                os.close(fd)


def _complete(tail: bytes) -> dict[str, Any] | None:
    """The record in a tail without newline, if it is a whole JSON object (no strict prefix of
    a JSON object is one)."""
    if not tail.strip():
        return None
    try:
        value = json.loads(tail)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


@contextlib.contextmanager
def promotion_lock(root: str | os.PathLike[str], timeout: float = 120.0) -> Iterator[None]:
    """The file lock ``<root>/promote.lock``; a folder where it cannot be made (read-only, no
    permission) is an InfrastructureError (exit 5) naming the folder, before anything is done."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(Path(root) / LOCK_FILE), timeout=timeout)
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise InfrastructureError(
            f"{Path(root) / LOCK_FILE}: lock not acquired within {timeout:g} s"
        ) from None
    except OSError as err:
        raise InfrastructureError(
            f"{Path(root).resolve()}: the registry folder is not writable ({LOCK_FILE}: "
            f"{err.strerror or err}): promotions write there"
        ) from None
    try:
        yield
    finally:
        lock.release()
