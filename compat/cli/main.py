"""The ``compat`` command line: one typer app, one module per command group.

Command modules import torch, mlflow and faiss inside their commands, so ``compat --help``
stays fast.
"""

from __future__ import annotations

import typer

from compat.cli.common import App

app = App(
    name="compat",  # help: main's docstring
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def package_version() -> str:
    """The installed distribution's version (importlib.metadata), or ``unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("compat")
    except PackageNotFoundError:
        return "unknown"


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"compat {package_version()}")
        raise typer.Exit(0)


@app.callback()
def main(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        help="Print compat's version and exit.",
    ),
) -> None:
    """Train, prove and promote backward-compatible embedding models.

    Exit codes: 0 success, or every criterion passed; 1 a criterion failed (promote); 2 usage
    error; 3 something named not found; 4 bad input (contract, card, params, embeddings,
    images); 5 the registry unreachable, or a full disk; 6 a conflict (production moved
    meanwhile, drift, another backfill writing --out); 7 nothing done (backfill with a refused
    psi, a refused query adapter). Each command's --help lists those it returns."""
    from compat.cli.common import quiet_mlflow_logs

    quiet_mlflow_logs()


def _register_commands() -> None:
    from compat.cli import backfill as backfill_cli
    from compat.cli import contract as contract_cli
    from compat.cli import data as data_cli
    from compat.cli import maps as maps_cli
    from compat.cli import registry_read as registry_read_cli
    from compat.cli import registry_write as registry_write_cli
    from compat.cli import score as score_cli

    data_cli.register(app)
    contract_cli.register(app)
    registry_write_cli.register(app)
    registry_read_cli.register(app)
    score_cli.register(app)
    backfill_cli.register(app)
    maps_cli.register(app)


_register_commands()


if __name__ == "__main__":  # pragma: no cover
    app()
