"""Shared CLI plumbing: map CompatError onto its exit code with a one-line message."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import typer

from compat.errors import CompatError


@contextlib.contextmanager
def exit_on_error() -> Iterator[None]:
    """Turn a CompatError into ``error: <message>`` on stderr and its documented exit code."""
    try:
        yield
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        raise typer.Exit(err.exit_code) from None
