"""The progress bar of a backfill (rows done, rows/s) on stderr; silent when disabled or when
stderr is not a terminal. One bar for the file backfill (:mod:`compat.backfill.apply`) and the
table backfill (:mod:`compat.backfill.table`)."""

from __future__ import annotations

import sys
from typing import Any


class Bar:
    """A rich progress bar on stderr (rows upgraded, rows/s); silent when disabled."""

    def __init__(self, total: int, done: int, enabled: bool | None, label: str) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.total, self.done, self.label = total, done, label
        self._p: Any = None
        self._task: Any = None

    def __enter__(self) -> Bar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]:>9.0f} rows/s"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._p.__enter__()
            self._task = self._p.add_task(
                self.label, total=self.total, completed=self.done, rate=0.0
            )
        return self

    def advance(self, rows: int, rate: float) -> None:
        if self._p is not None:
            self._p.update(self._task, advance=rows, rate=rate)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)


__all__ = ["Bar"]
