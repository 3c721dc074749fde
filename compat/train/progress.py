"""What a run reports while it trains: a rich progress bar, per-epoch JSON rows, MLflow metrics.

The bar shows epoch, loss parts and images/s; it is off when stderr is not a terminal (DVC logs,
CI) or when asked, and then one line per epoch is printed instead. Per-epoch rows go to a JSON
file DVC can plot (``{"epochs": [rows], "summary": {...}}``: ``dvc plots`` finds the list) and,
when an MLflow run is active in this process, to MLflow. mlflow is never imported here: if the
caller has not imported it, no run can be active.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from compat.io import write_json


class Reporter:
    def __init__(self, epochs: int, enabled: bool | None = None, quiet: bool = False) -> None:
        self.epochs = epochs
        self.quiet = quiet
        self.enabled = (sys.stderr.isatty() if enabled is None else enabled) and not quiet
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Reporter:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[parts]}"),
                TextColumn("{task.fields[ips]:>7.0f} img/s"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self._progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def start_epoch(self, epoch: int, steps: int) -> None:
        if self._progress is not None:
            self._task = self._progress.add_task(
                f"epoch {epoch + 1}/{self.epochs}", total=steps, parts="", ips=0.0
            )

    def update(self, done: int, parts: dict[str, float], images_per_s: float) -> None:
        if self._progress is not None and self._task is not None:
            text = " ".join(f"{k}={v:.3f}" for k, v in parts.items())
            self._progress.update(self._task, completed=done, parts=text, ips=images_per_s)

    def end_epoch(self, row: dict[str, Any]) -> None:
        if self._progress is None and not self.quiet:
            parts = " ".join(
                f"{k}={v:.4f}" for k, v in row.items() if k.startswith("loss") and v is not None
            )
            print(
                f"epoch {row['epoch']}/{self.epochs} {parts} lr={row['lr']:.2e} "
                f"{row['images_per_s']:.0f} img/s {row['seconds']:.1f}s",
                file=sys.stderr,
                flush=True,
            )


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A flat dict of the final epoch's numbers plus totals (what DVC metrics show)."""
    if not rows:
        return {}
    last = rows[-1]
    out = {k: v for k, v in last.items() if isinstance(v, int | float)}
    out["seconds_total"] = float(sum(r["seconds"] for r in rows))
    out["images_per_s_mean"] = float(sum(r["images_per_s"] for r in rows) / len(rows))
    return out


def write_metrics(path: str | Path, rows: list[dict[str, Any]]) -> None:
    write_json(path, {"epochs": rows, "summary": summary(rows)})


def log_mlflow(row: dict[str, Any]) -> None:
    mlflow = sys.modules.get("mlflow")
    if mlflow is None or mlflow.active_run() is None:
        return
    metrics = {f"train/{k}": float(v) for k, v in row.items() if k != "epoch" and v is not None}
    mlflow.log_metrics(metrics, step=int(row["epoch"]))
