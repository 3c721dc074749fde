"""Shared CLI plumbing: errors as one line and an exit code, MLflow kept quiet, the project test,
the app class whose help shows boolean flags as flags.

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
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from compat.errors import CompatError, NotFoundError

PROJECT_MARKERS = ("params.yaml", "dvc.yaml", "registry")


def _plain_flags(params: list[Any]) -> list[Any]:
    """Boolean flags (``--json``, ``--help``) shown as flags: typer's help would write
    ``--json <bool>``, as if the option took a value (``--json true`` is a usage error)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def _unwrapped(text: str | None) -> str | None:
    """Help prose as paragraphs that wrap to the terminal: typer's rich help keeps a
    docstring's single line breaks, which break lines mid-sentence on a narrow terminal. A
    paragraph starting with ``\\b`` (click's mark) is kept as written."""
    if not text:
        return text
    paragraphs = text.split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


class _ReadableHelp:
    """Help prose rewrapped, boolean flags shown without a value (mixed into typer's classes)."""

    help: str | None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = _unwrapped(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))  # type: ignore[misc]


class Command(_ReadableHelp, TyperCommand):
    """A compat command (see :class:`_ReadableHelp`)."""


class Group(_ReadableHelp, TyperGroup):
    """A compat command group (``compat``, ``compat data``), as :class:`Command`."""


class App(typer.Typer):
    """``typer.Typer`` whose commands and groups are :class:`Command` and :class:`Group`."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", Group)
        super().__init__(**kwargs)

    def command(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["cls"] = kwargs.get("cls") or Command
        return super().command(*args, **kwargs)


@contextlib.contextmanager
def exit_on_error(on_error: Callable[[CompatError], None] | None = None) -> Iterator[None]:
    """Turn a CompatError into ``error: <message>`` on stderr and its documented exit code
    (``on_error`` is told first, e.g. to write the CI step summary). Credentials of any URI
    in the message are hidden (:func:`compat.registry.uris.mask`), whoever raised it."""
    try:
        yield
    except CompatError as err:
        from compat.registry.uris import mask

        err.message = mask(err.message)
        print(f"error: {err.message}", file=sys.stderr)
        if on_error is not None:
            on_error(err)
        raise typer.Exit(err.exit_code) from None


def check_bootstrap_options(
    resamples: int | None = None,
    seed: int | None = None,
    resamples_option: str = "--resamples",
    seed_option: str = "--seed",
) -> None:
    """A resamples count and a seed within the bounds params.yaml holds them to
    (:data:`compat.compare.bootstrap.MAX_RESAMPLES`, ``MAX_SEED``): a UsageError (exit 2) naming
    the option before any work, not a traceback (or gigabytes) after it. None: not given."""
    from compat.compare.bootstrap import MAX_RESAMPLES, MAX_SEED
    from compat.errors import UsageError

    if resamples is not None and not 0 <= resamples <= MAX_RESAMPLES:
        raise UsageError(
            f"{resamples_option} {resamples}: expected 0 .. {MAX_RESAMPLES:,} resamples (as "
            "params.yaml's evaluate.bootstrap)"
        )
    if seed is not None and not 0 <= seed <= MAX_SEED:
        raise UsageError(f"{seed_option} {seed}: expected a seed in 0 .. 2**32 - 1")


_USER_SET = {k for k in ("MLFLOW_LOGGING_LEVEL",) if k in os.environ}  # before compat sets it


def quiet_mlflow_logs() -> None:
    """Keep MLflow's and alembic's INFO lines (schema migrations, ...) off the user's terminal:
    MLflow reads ``MLFLOW_LOGGING_LEVEL`` when it is imported; loggers already configured are
    raised to WARNING directly. A level the user set in the environment is kept."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    level = getattr(logging, os.environ["MLFLOW_LOGGING_LEVEL"].upper(), logging.WARNING)
    for name in ("mlflow", "alembic"):
        logger = logging.getLogger(name)
        logger.setLevel(max(level, logging.WARNING) if name == "alembic" else level)
    # Its store logs every failed database statement with a traceback before raising it; the
    # exception reaches compat, which says it in one line (a full disk, a locked database).
    if "MLFLOW_LOGGING_LEVEL" not in _USER_SET:
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)


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
