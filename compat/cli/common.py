"""Shared CLI plumbing: errors as one line and an exit code, MLflow kept quiet, the project test.

**A project** is the folder a command runs in when it holds ``params.yaml``, ``dvc.yaml`` or a
``registry/`` folder (the embedded store), or when the registry is named explicitly
(``--registry-uri`` or ``MLFLOW_TRACKING_URI``). Read commands (versions, show, chain, log)
outside a project say so and exit 3, creating nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import typer

from compat.errors import CompatError, NotFoundError

PROJECT_MARKERS = ("params.yaml", "dvc.yaml", "registry")


@contextlib.contextmanager
def exit_on_error(on_error: Callable[[CompatError], None] | None = None) -> Iterator[None]:
    """Turn a CompatError into ``error: <message>`` on stderr and its documented exit code
    (``on_error`` is told first, e.g. to write the CI step summary)."""
    try:
        yield
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        if on_error is not None:
            on_error(err)
        raise typer.Exit(err.exit_code) from None


def quiet_mlflow_logs() -> None:
    """Keep MLflow's and alembic's INFO lines (schema migrations, ...) off the user's terminal:
    MLflow reads ``MLFLOW_LOGGING_LEVEL`` when it is imported; loggers already configured are
    raised to WARNING directly. A level the user set in the environment is kept."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    level = getattr(logging, os.environ["MLFLOW_LOGGING_LEVEL"].upper(), logging.WARNING)
    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        logger.setLevel(max(level, logging.WARNING) if name == "alembic" else level)


def in_project(folder: Path | None = None) -> bool:
    """Whether ``folder`` (default: the working directory) is a compat project."""
    folder = Path.cwd() if folder is None else folder
    return any((folder / marker).exists() for marker in PROJECT_MARKERS)


def require_project(uri: str | None) -> None:
    """Refuse to read a registry outside a project (exit 3) unless one is named explicitly."""
    if uri:
        return
    if not in_project():
        raise NotFoundError(
            f"{Path.cwd()}: not a compat project (no {', '.join(PROJECT_MARKERS)}): run in the "
            "project folder, or name a registry with --registry-uri or MLFLOW_TRACKING_URI"
        )
