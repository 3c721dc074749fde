"""``compat contract validate FILE``: report every problem of a contract file."""

from __future__ import annotations

from pathlib import Path

import typer

from compat.cli.common import exit_on_error

contract_app = typer.Typer(
    help="Compatibility contracts (contracts/<version>.yaml).", no_args_is_help=True
)


@contract_app.command("validate")
def validate(files: list[Path] = typer.Argument(..., help="contract YAML files")) -> None:
    """Check contract files; print `file: field: reason` for every problem (exit 4 if any)."""
    from compat.contracts.schema import check_contract

    problems: list[str] = []
    with exit_on_error():
        for f in files:
            contract, found = check_contract(f)
            problems += found
            if contract is not None:
                typer.echo(
                    f"{f}: ok ({contract.version}, parent {contract.parent}, {len(contract.criteria)} criteria)"
                )
    for p in problems:
        typer.echo(p, err=True)
    if problems:
        raise typer.Exit(4)


def register(app: typer.Typer) -> None:
    app.add_typer(contract_app, name="contract")
