"""What every DVC stage script shares: its arguments, its params section, its training data and
its exit.

A stage script (``stages/<name>.py``) stays thin (docs/design.md, "Thin stages"): it declares its
own arguments, then calls the library. What all of them repeat lives here once:

- :func:`run_stage`: runs the stage's body and turns a :class:`~compat.errors.CompatError` into
  ``error: <message>`` on stderr and its exit code (every stage exits like the CLI does);
- :func:`version_parser` and :func:`version_section`: a per-version stage's arguments (``train``,
  ``upgrade``: the version, ``--params``, ``--source``, ``--splits``, ``--models``,
  ``--no-progress``) and its entry of a params section, the version name checked first (it
  becomes ``models/<version>/``, so it must not leave the project);
- :func:`training_set`: the image source and the training manifest a version was trained on,
  refused when the split was made from another source.

It sits on the top floor beside :mod:`compat.params`: it reads params sections and opens data.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from compat.errors import BadInputError, CompatError
from compat.params import PARAMS_FILE, read_section

M = TypeVar("M")


def run_stage(body: Callable[[], int | None]) -> int:
    """``body()``'s exit code (None: 0); a CompatError it raises is printed as one
    ``error: <message>`` line on stderr and becomes the error's exit code."""
    try:
        return body() or 0
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code


def version_parser(doc: str) -> argparse.ArgumentParser:
    """The arguments of a stage that works on one version (first line of ``doc`` as its
    description)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("version")
    parser.add_argument("--params", default=PARAMS_FILE)
    parser.add_argument("--source", default="data/source.json")
    parser.add_argument("--splits", default="splits")
    parser.add_argument("--models", default="models")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def version_section(args: argparse.Namespace, section: str, model: type[M], missing: str) -> M:
    """``args.version``'s entry of ``section`` in ``args.params``, validated by ``model``;
    ``missing`` words the error of a version the section does not declare (``{known}`` lists
    those it does). A version name that could not be a folder name is exit 4 naming the file."""
    from compat.names import name_problem

    problem = name_problem(args.version)
    if problem:  # the name becomes models/<version>/: it must not leave the project
        raise BadInputError(f"{args.params}: {section}.{args.version}: {problem}")
    return read_section(args.params, section, model, args.version, missing=missing)


def training_set(source_path: str | Path, splits: str | Path, split: str) -> tuple[Any, Any]:
    """(source, manifest) of training split ``split``: ``splits/<split>.json`` and the image
    source it was made from. A manifest made from another source than the one there now is exit
    4 naming both (the split stage must run again)."""
    from compat.data.sources import open_source
    from compat.data.split import load_train_manifest

    source = open_source(source_path)
    manifest = load_train_manifest(Path(splits) / f"{split}.json")
    if manifest.source_fingerprint != source.fingerprint:
        raise BadInputError(
            f"{splits}/{split}.json: made from source {manifest.source_fingerprint}, "
            f"but the source is now {source.fingerprint}; re-run the split stage"
        )
    return source, manifest
