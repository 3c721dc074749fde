"""Where a backfill runs psi: in this process (``local``) or on Ray workers (``ray``).

An engine is a parameter of the one backfill loop (:func:`compat.backfill.apply.backfill`),
not a second loop: the loop reads the gallery's blocks, hands each block's rows to the engine
and writes what comes back, in row order. Both engines open the map folder with
:func:`compat.maps.open_map` (psi's or a :mod:`compat.maps` gallery map) and compute a block
with its ``apply`` at the block's row offset, over the same fixed row blocks
(:mod:`compat.models.rowblocks`), so their outputs are the same bits whatever the batch size,
and the same as the in-memory path (the map applied to the whole matrix).

``ray`` runs on a local Ray runtime or the cluster named by ``RAY_ADDRESS``: each block is one
Ray task (one CPU; each worker process loads psi once), at most ``in_flight`` blocks are out at
a time, and the results come back in order. psi's work scales with the workers; reading the
gallery and the ordered write stay at the driver.

A table gallery's backfill (:mod:`compat.backfill.table`) hands out whole fragments instead of
blocks: :func:`make_tasks` runs any function over a sequence of jobs, in this process or as Ray
tasks, results in order; there each task reads its fragment, runs the map and writes the
fragment's new column file itself, so reading and writing scale with the workers too.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from compat.errors import UsageError

T = TypeVar("T")

ENGINES = ("local", "ray")

# psi per process, loaded by the first block that process upgrades (a Ray worker process runs
# many tasks; it loads psi once). Keyed by folder, weights digest and device.
_PSI: dict[tuple[str, str, str], Any] = {}


def _folded(psi_path: str, sha256: str, device: str) -> Any:
    from compat.maps.folder import open_map

    key = (psi_path, sha256, device)
    if key not in _PSI:
        opened = open_map(psi_path, device)  # psi's or a gallery map's (weights' sha256 checked)
        if opened.weights_sha256 != sha256:  # the folder changed under a running backfill
            from compat.errors import BadInputError

            raise BadInputError(
                f"{Path(psi_path) / 'card.json'}: weights_sha256: the map changed during the "
                f"backfill ({sha256[:12]}... when it started, {opened.weights_sha256[:12]}... now)"
            )
        _PSI[key] = opened
    return _PSI[key]


def upgrade_rows(psi_path: str, sha256: str, device: str, x: np.ndarray, start: int) -> np.ndarray:
    """psi over rows ``start ..`` of a gallery (what every engine computes for a block)."""
    return _folded(psi_path, sha256, device).apply(x, start)


class Engine(Protocol):
    def map(
        self, jobs: Iterable[tuple[T, np.ndarray | None, int]]
    ) -> Iterator[tuple[T, np.ndarray | None]]:
        """For each ``(tag, rows, start)`` in order: ``(tag, psi over rows)``; ``rows`` None
        (a block with nothing to upgrade) comes back as None."""
        ...


class LocalEngine:
    """psi in this process, one block after another."""

    def __init__(self, psi_path: Path, sha256: str, device: str = "cpu") -> None:
        self.args = (str(psi_path), sha256, device)

    def map(
        self, jobs: Iterable[tuple[T, np.ndarray | None, int]]
    ) -> Iterator[tuple[T, np.ndarray | None]]:
        for tag, x, start in jobs:
            yield tag, None if x is None else upgrade_rows(*self.args, x, start)


def ray_runtime() -> Any:
    """The ``ray`` module, its runtime started (a usage error naming the extra without Ray)."""
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--engine ray needs Ray, an optional dependency: pip install 'compat[ray]'"
        ) from None
    if not ray.is_initialized():
        # RAY_ADDRESS names a cluster; without it a local runtime starts (and stops at exit).
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 logging_level="ERROR", log_to_driver=False)  # fmt: skip
    return ray


class RayEngine:
    """psi as one Ray task per block, at most ``in_flight`` blocks out at a time."""

    def __init__(
        self, psi_path: Path, sha256: str, device: str = "cpu", in_flight: int | None = None
    ) -> None:
        ray = ray_runtime()
        self._ray = ray
        self._task = ray.remote(num_cpus=1)(upgrade_rows)
        self.args = (str(psi_path), sha256, device)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        # Two blocks per CPU keep every worker busy while the driver reads and writes.
        self.in_flight = in_flight or max(2, 2 * cpus)

    def map(
        self, jobs: Iterable[tuple[T, np.ndarray | None, int]]
    ) -> Iterator[tuple[T, np.ndarray | None]]:
        pending: deque[tuple[T, Any]] = deque()
        for tag, x, start in jobs:
            ref = None if x is None else self._task.remote(*self.args, x, start)
            pending.append((tag, ref))
            if len(pending) >= self.in_flight:
                yield self._take(pending)
        while pending:
            yield self._take(pending)

    def _take(self, pending: deque[tuple[T, Any]]) -> tuple[T, np.ndarray | None]:
        tag, ref = pending.popleft()
        return tag, None if ref is None else _ray_get(self._ray, ref)


def _ray_get(ray: Any, ref: Any) -> Any:
    """A task's result; a CompatError it raised is raised here, one line, as a local run says it."""
    from compat.errors import CompatError

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        if isinstance(err.cause, CompatError):
            raise err.cause from None
        raise


class LocalTasks:
    """Jobs run one after another in this process."""

    def map(self, fn: Callable[[Any], Any], jobs: Iterable[Any]) -> Iterator[Any]:
        for job in jobs:
            yield fn(job)


class RayTasks:
    """Each job one Ray task (one CPU), at most two per CPU out at a time, results in order."""

    def __init__(self, in_flight: int | None = None) -> None:
        self._ray = ray_runtime()
        cpus = int(self._ray.cluster_resources().get("CPU", 1))
        self.in_flight = in_flight or max(2, 2 * cpus)

    def map(self, fn: Callable[[Any], Any], jobs: Iterable[Any]) -> Iterator[Any]:
        task = self._ray.remote(num_cpus=1)(fn)
        pending: deque[Any] = deque()
        for job in jobs:
            pending.append(task.remote(job))
            if len(pending) >= self.in_flight:
                yield _ray_get(self._ray, pending.popleft())
        while pending:
            yield _ray_get(self._ray, pending.popleft())


def make_tasks(name: str) -> LocalTasks | RayTasks:
    """Where a table backfill's fragments run: ``local`` or ``ray`` (:data:`ENGINES`)."""
    if name not in ENGINES:
        raise UsageError(f"--engine {name!r}: expected one of {', '.join(ENGINES)}")
    return RayTasks() if name == "ray" else LocalTasks()


def make_engine(name: str, psi_path: Path, sha256: str, device: str = "cpu") -> Engine:
    """The engine called ``name`` (one of :data:`ENGINES`)."""
    if name == "ray":
        return RayEngine(psi_path, sha256, device)
    return LocalEngine(psi_path, sha256, device)


__all__ = [
    "ENGINES",
    "Engine",
    "LocalEngine",
    "LocalTasks",
    "RayEngine",
    "RayTasks",
    "make_engine",
    "make_tasks",
    "ray_runtime",
    "upgrade_rows",
]
