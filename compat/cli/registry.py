"""What the registry commands share (:mod:`compat.cli.registry_write`: register, promote;
:mod:`compat.cli.registry_read`: versions, show, chain, log, verify): the registry a command
names, the ``--registry-uri`` and ``--json`` options, the test for an embedded store not made
yet, warnings on stderr (drift among them) and the table of checks.

Exit codes (documented in the README): 0 pass, 1 a criterion failed, 2 usage error, 3 something
named was not found, 4 bad input (contract, card, embeddings; a registered model whose files
changed since registration), 5 registry unreachable,
6 production moved concurrently (the compare-and-set was lost; re-run the gate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from compat.cli import output
from compat.cli.common import quiet_mlflow_logs, require_project

REGISTRY_ROOT = Path("registry")

UriOption = typer.Option(
    None,
    "--registry-uri",
    envvar="MLFLOW_TRACKING_URI",
    help="MLflow tracking URI (default: sqlite under registry/)",
)
JsonOption = typer.Option(False, "--json", help="print one JSON object")


def named_registry(uri: str | None, read: bool = False) -> Any:
    """The registry the command names. ``read``: a read command, which outside a project
    (compat.cli.common) exits 3, never creates the local store and opens the registry
    read-only (a folder the user cannot write to serves), through the reader that imports no
    mlflow (:mod:`compat.registry.reader`) unless the URI is one only MLflow reads."""
    quiet_mlflow_logs()
    if read:
        require_project(uri)
        from compat.registry.reader import open_registry

        return open_registry(uri, root=REGISTRY_ROOT)
    from compat.registry.store import Registry

    return Registry(uri=uri, root=REGISTRY_ROOT)


def store_missing(reg: Any) -> bool:
    """Whether the registry is the local one and its database does not exist yet (a damaged
    one is exit 5: ``Registry.local_store_exists``)."""
    return reg.is_local and not reg.local_store_exists()


def no_store_error(reg: Any) -> Exception:
    """What a command that needs a registered version says where no store was made yet."""
    from compat.errors import NotFoundError

    return NotFoundError(
        f"{reg.root / 'mlflow.db'}: no registry yet: nothing is registered (compat register <version>)"
    )


def warn(message: str) -> None:
    """A warning (drift, a log not read): always one line on stderr, in every command."""
    typer.echo(f"warning: {message}", err=True)


def warn_drift(reg: Any, entries: list[dict[str, Any]] | None = None) -> None:
    """Say on stderr when the production alias disagrees with the promotion log."""
    from compat.errors import CompatError
    from compat.registry.drift import drift

    if entries is None:
        try:
            entries = reg.ledger().promotions()
        except CompatError as err:  # the listing itself does not depend on the log
            warn(f"promotion log not read: {err.message}")
            return
    message = drift(reg.production(), entries)
    if message:
        warn(message)


def print_checks(checks: list[dict[str, Any]], title: str, query: list[str] | None = None) -> None:
    """Checks as one table (:func:`compat.cli.output.check_cells`; folded into fewer wrapping
    columns on a terminal too narrow for it, :func:`compat.cli.output.folded_check_cells`);
    ``query``: a first column naming each row's query version (``chain``)."""
    columns = list(output.CHECK_COLUMNS)
    rows = [output.check_cells(c) for c in checks]
    folded_columns = list(output.FOLDED_CHECK_COLUMNS)
    folded = [output.folded_check_cells(c) for c in checks]
    if query is not None:
        columns = [output.Column("query"), *columns]
        rows = [[q, *r] for q, r in zip(query, rows, strict=True)]
        folded_columns = [output.Column("query"), *folded_columns]
        folded = [[q, *r] for q, r in zip(query, folded, strict=True)]
    output.print_table(columns, rows, title=title, folded=(folded_columns, folded))
