"""Registry commands: register, promote, versions, show, chain, log, verify.

Exit codes (documented in the README): 0 pass, 1 a criterion failed, 2 usage error, 3 something
named was not found, 4 bad input (contract, card, embeddings), 5 registry unreachable,
6 production moved concurrently (the compare-and-set was lost; re-run the gate).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from compat.cli.common import exit_on_error

REGISTRY_ROOT = Path("registry")


def _registry(uri: str | None) -> Any:
    from compat.registry.store import Registry

    return Registry(uri=uri, root=REGISTRY_ROOT)


def _echo_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, sort_keys=True, default=str))


def _console() -> Any:
    from rich.console import Console

    return Console()


UriOption = typer.Option(
    None,
    "--registry-uri",
    envvar="MLFLOW_TRACKING_URI",
    help="MLflow tracking URI (default: sqlite under registry/)",
)
JsonOption = typer.Option(False, "--json", help="print one JSON object")


def register_cmd(
    version: str = typer.Argument(..., help="the version to register, e.g. v2"),
    embeddings: Path | None = typer.Option(
        None,
        "--embeddings",
        help="register from an embeddings bundle (.npz) of the evaluation set instead of models/<version>",
    ),
    models: Path = typer.Option(Path("models"), help="folder of trained versions"),
    contracts: Path = typer.Option(Path("contracts"), help="folder of contracts"),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Log a version's run (params, metrics, card, weights, contract) and register it."""
    from compat.registry.register import register

    with exit_on_error():
        rec, created = register(_registry(uri), version, models, contracts, embeddings)
    if as_json:
        _echo_json(
            {
                "version": rec.name,
                "mlflow_version": rec.mlflow_version,
                "created": created,
                "tags": rec.tags,
            }
        )
        return
    what = "registered" if created else "already registered (same weights)"
    typer.echo(f"{version}: {what} as MLflow version {rec.mlflow_version}")


def promote_cmd(
    version: str = typer.Argument(..., help="the candidate version"),
    against: str | None = typer.Option(
        None,
        "--against",
        help="the version production must still point at (compare-and-set); `none` (or omitted) for the first promotion, while production is unset",
    ),
    paragon: str | None = typer.Option(
        None,
        help="version to measure the update gain against (default: the contract's paragon, else params.yaml evaluate.paragon)",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="evaluate and print the verdict; write nothing"
    ),
    bootstrap: int = typer.Option(1000, min=0, help="bootstrap resamples over queries"),
    seed: int = typer.Option(0),
    contracts: Path = typer.Option(Path("contracts")),
    models: Path = typer.Option(Path("models")),
    eval_manifest: Path = typer.Option(
        Path("splits/eval.json"), "--eval", help="evaluation manifest"
    ),
    source: Path = typer.Option(
        Path("data/source.json"), help="image source of the evaluation set"
    ),
    cache: Path = typer.Option(Path("cache/embeddings"), help="embedding cache"),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Gate VERSION on its contract; move `production` to it only if every criterion passes."""
    from compat.registry.promote import Paths, promote

    paths = Paths(
        contracts=contracts, models=models, eval_manifest=eval_manifest, source=source, cache=cache
    )
    with exit_on_error():
        outcome = promote(
            version,
            against,
            reg=_registry(uri),
            paths=paths,
            paragon=paragon,
            resamples=bootstrap,
            seed=seed,
            dry_run=dry_run,
        )
    report = {**outcome.report, "moved": outcome.moved, "messages": outcome.messages}
    if as_json:
        _echo_json(report)
    else:
        _print_verdict(report)
    raise typer.Exit(outcome.exit_code)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.4f}"


def _print_verdict(report: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    if not report["criteria"]:
        console.print(f"{report['version']} has no parent: no criteria to check")
    else:
        title = f"{report['version']} vs {report['parent']}"
        table = Table(title=title + (" (dry run)" if report["dry_run"] else ""))
        columns = (
            "protocol",
            "metric",
            "require",
            "gallery",
            "new",
            "baseline",
            "diff",
            "lower bound",
            "verdict",
        )
        for col in columns:
            table.add_column(col, no_wrap=True)
        for c in report["criteria"]:
            table.add_row(
                c["protocol"],
                c["metric"],
                c["require"] + (f" + {c['margin']:g}" if c["margin"] else ""),
                c["gallery"],
                _fmt(c["lhs_value"]),
                _fmt(c["rhs_value"]),
                _fmt(c["difference"]),
                _fmt(c["lower_bound"]) if c["confidence"] else "-",
                "[green]pass[/]" if c["passed"] else "[red]FAIL[/]",
            )
        console.print(table)
    for protocol, per in report["gain"].items():
        for metric, g in per.items():
            value = "n/a" if g["value"] is None else f"{g['value']:.1%}"
            console.print(
                f"update gain {protocol} {metric} vs {g['paragon']}: {value} ({g['reason']})"
            )
    for msg in report["messages"]:
        console.print(msg)
    if report["dry_run"]:
        console.print("dry run: nothing recorded")
    elif report["passed"]:
        console.print(
            f"[green]PASSED[/]: production -> {report['version']}"
            if report["moved"]
            else "[green]PASSED[/]"
        )
    else:
        console.print("[red]FAILED[/]: production unchanged")


def versions_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """List registered versions with parent, status and alias."""
    with exit_on_error():
        reg = _registry(uri)
        records = reg.versions()
        _warn_drift(reg)
    rows = [
        {
            "version": r.name,
            "mlflow_version": r.mlflow_version,
            "parent": r.parent,
            "status": r.status,
            "method": r.tags.get("compat.method", ""),
            "dim": r.tags.get("compat.dim", ""),
            "production": "production" in r.aliases,
        }
        for r in records
    ]
    if as_json:
        _echo_json({"versions": rows})
        return
    from rich.table import Table

    table = Table(title="registered versions")
    for col in ("version", "mlflow", "parent", "method", "dim", "status", "alias"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["version"],
            r["mlflow_version"],
            r["parent"] or "-",
            r["method"],
            r["dim"],
            r["status"],
            "production" if r["production"] else "",
        )
    _console().print(table)


def show_cmd(
    version: str = typer.Argument(...), uri: str | None = UriOption, as_json: bool = JsonOption
) -> None:
    """Show one version: tags, description, alias."""
    with exit_on_error():
        reg = _registry(uri)
        rec = reg.get(version)
        prod = reg.production_mlflow_version()
    info = {
        "version": rec.name,
        "mlflow_version": rec.mlflow_version,
        "run_id": rec.run_id,
        "source": rec.source,
        "production": prod == rec.mlflow_version,
        "tags": rec.tags,
        "description": rec.description,
    }
    if as_json:
        _echo_json(info)
        return
    from rich.table import Table

    table = Table(title=f"{version} (MLflow version {rec.mlflow_version})", show_header=False)
    table.add_row("production", "yes" if info["production"] else "no")
    table.add_row("run", str(rec.run_id))
    for k in sorted(rec.tags):
        table.add_row(k, rec.tags[k])
    console = _console()
    console.print(table)
    if rec.description:
        console.print(rec.description)


def chain_cmd(
    version: str | None = typer.Argument(None, help="default: the production version"),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Lineage of a version with the recorded verdict of every (version, ancestor) pair."""
    from compat.registry.chain import lineage

    with exit_on_error():
        result = lineage(_registry(uri), version)
    if as_json:
        _echo_json(result)
        return
    from rich.table import Table

    console = _console()
    console.print(" -> ".join(result["lineage"]))
    table = Table(title="pairs")
    for col in ("query", "gallery", "kind", "verdict", "checks"):
        table.add_column(col)
    for p in result["pairs"]:
        style = {
            "pass": "[green]pass[/]",
            "fail": "[red]FAIL[/]",
            "never checked": "[yellow]never checked[/]",
        }[p["verdict"]]
        table.add_row(p["query"], p["gallery"], p["kind"], style, "; ".join(p["checks"]))
    console.print(table)


def log_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """The promotion log: who moved production, when, from what to what."""
    with exit_on_error():
        reg = _registry(uri)
        entries = reg.ledger().promotions()
        _warn_drift(reg, entries)
    if as_json:
        _echo_json({"promotions": entries})
        return
    from rich.table import Table

    table = Table(title="promotions")
    for col in ("when", "who", "from", "to", "state", "contract", "report"):
        table.add_column(col)
    for e in entries:
        table.add_row(
            e["when"],
            e["who"],
            str(e.get("from")),
            e["to"],
            e["state"] + (" (recovered)" if e.get("recovered") else ""),
            e.get("contract_sha256", "")[:12],
            e.get("report_sha256", "")[:12],
        )
    _console().print(table)


def _warn_drift(reg: Any, entries: list[dict[str, Any]] | None = None) -> None:
    """Say on stderr when the production alias disagrees with the promotion log."""
    from compat.errors import CompatError
    from compat.registry.drift import drift

    if entries is None:
        try:
            entries = reg.ledger().promotions()
        except CompatError as err:  # the listing itself does not depend on the log
            typer.echo(f"warning: promotion log not read: {err.message}", err=True)
            return
    message = drift(reg.production(), entries)
    if message:
        typer.echo(f"warning: {message}", err=True)


def verify_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """Check that `production` is where the promotion log's last committed move put it (exit 6 if not)."""
    from compat.registry.drift import verify

    with exit_on_error():
        result = verify(_registry(uri))
    if as_json:
        _echo_json(result)
        return
    where = result["production"] or "unset"
    typer.echo(f"production is {where}, as the promotion log says ({result['log']})")


def register(app: typer.Typer) -> None:
    app.command("register")(register_cmd)
    app.command("promote")(promote_cmd)
    app.command("versions")(versions_cmd)
    app.command("show")(show_cmd)
    app.command("chain")(chain_cmd)
    app.command("log")(log_cmd)
    app.command("verify")(verify_cmd)
