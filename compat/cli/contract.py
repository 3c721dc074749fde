"""``compat contract validate FILE``: report every problem of a contract file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from compat.cli.common import App, exit_on_error

contract_app = App(
    help="Compatibility contracts (contracts/<version>.yaml).\n\n"
    "Exit codes: 0 every file valid; 2 usage (bad option, no file given); 3 a file not found; 4 "
    "a file with problems (each printed as file: field: reason).",
    no_args_is_help=True,
)


def _problem(path: Path, text: str) -> dict[str, str]:
    """``file: field: reason`` (as compat.contracts.schema reports it) as an object."""
    rest = text[len(f"{path}: ") :] if text.startswith(f"{path}: ") else text
    field, _, reason = rest.partition(": ")
    return {"file": str(path), "field": field, "reason": reason}


@contract_app.command("validate")
def validate(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE", help="contract YAML files (contracts/<version>.yaml)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
) -> None:
    """Check contract files; print `file: field: reason` for every problem (exit 4 if any).

    Exit codes: 0 every file valid; 2 usage (bad option, no file given); 3 a file not found;
    4 a file with problems (each printed; with --json in the object)."""
    from compat.cli import output
    from compat.contracts.schema import check_contract

    problems: list[str] = []
    results: list[dict[str, Any]] = []
    with exit_on_error():
        for f in files:
            contract, found = check_contract(f)
            problems += found
            results.append(
                {
                    "file": str(f),
                    "valid": contract is not None,
                    "version": None if contract is None else contract.version,
                    "parent": None if contract is None else contract.parent,
                    "criteria": None if contract is None else len(contract.criteria),
                    "problems": [_problem(f, p) for p in found],
                }
            )
            if contract is not None and not as_json:
                parent = contract.parent or "none"
                typer.echo(
                    f"{f}: ok ({contract.version}, parent {parent}, {len(contract.criteria)} criteria)"
                )
    if as_json:
        output.echo_json({"valid": not problems, "files": results})
    else:
        for p in problems:
            typer.echo(p, err=True)
    if problems:
        raise typer.Exit(4)


def register(app: typer.Typer) -> None:
    app.add_typer(contract_app, name="contract")
