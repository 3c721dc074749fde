"""The commands that write the registry: ``compat register`` (a version's run and its
registration), ``compat promote`` (the gate, then the compare-and-set on ``production``;
``--dry-run`` only reads) and ``compat unregister`` (a registration undone, logged). What
they share with the read commands is :mod:`compat.cli.registry`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from compat.cli import output
from compat.cli.common import check_bootstrap_options, exit_on_error
from compat.cli.registry import JsonOption, UriOption, named_registry, print_checks, warn


def register_cmd(
    version: str = typer.Argument(..., metavar="VERSION", help="the version to register, e.g. v2"),
    embeddings: Path | None = typer.Option(
        None,
        "--embeddings",
        help="register from the version's embeddings of the evaluation set instead of "
        "models/<version>: an .npz bundle, an .npy matrix (labels in a <stem>.meta.npz sidecar) "
        "or a folder of Parquet shards",
    ),
    models: Path = typer.Option(
        Path("models"), help="folder of trained versions (models/<version>/)"
    ),
    contracts: Path = typer.Option(Path("contracts"), help="folder of contracts (<version>.yaml)"),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Log a version's run (params, metrics, card, weights, contract) and register it.

    Exit codes: 0 registered (or already registered with the same weights); 2 usage (bad
    option); 3 not found (the version's folder, weights or card, its contract, the embeddings
    file, the folder of a sqlite:/// URI); 4 bad input (card, contract, embeddings: wrong
    dimension, NaN; a version name that is not letters, digits, `.`, `_`, `-`; other weights
    under a registered name, both digests named); 5 registry unreachable, or a full disk,
    spent quota or read-only file system; 6 a write that kept conflicting with a concurrent one
    on the server."""
    from compat.registry.register import register

    with exit_on_error():
        rec, created = register(named_registry(uri), version, models, contracts, embeddings)
    if as_json:
        output.echo_json(
            {
                "version": rec.name,
                "mlflow_version": output.as_int(rec.mlflow_version),
                "created": created,
                "tags": rec.tags,
            }
        )
        return
    what = "registered" if created else "already registered (same weights)"
    typer.echo(f"{version}: {what} as MLflow version {rec.mlflow_version}")


PROMOTE_HELP = """Gate VERSION on its contract; move `production` to it only if every criterion passes.

Promoting a version while production is not one of its ancestors (a newer or an unrelated
version) is a rollback: it needs --rollback and is also gated on the rows production (and any
version served since VERSION last was) embedded, on the contract's rollback criteria (by
default M(VERSION, production) against M(VERSION, VERSION): no loss on those rows). A loss is
accepted by a margin in the contract's rollback.criteria, or by --accept-loss WHY (logged with
who and why); a failed rollback check names the key to write (docs/rollback.md).

A dry run judges exactly as the real run and exits with its code, writing nothing; with --local
it gates versions read from files (models/<v>/, or <--embeddings-dir>/<v>.npz) that are not
registered, against the registry's versions (a pull request's candidate).

With --gallery TABLE (a LanceDB table, <folder>/<name>.lance) the gate first reads the rows
VERSION would serve (each from vec_VERSION where the row has it, else from the newest other
column) and refuses (exit 4) rows of a version it does not measure VERSION's queries on, or
rows a map moved that it did not measure; the move logs the table's path, version, the column
served and each version's rows, and tags that table version (compat-VERSION-t<n>) so Lance's
clean-up keeps it (docs/lancedb.md).

Exit codes: 0 every criterion passed (production moved, or already pointed at VERSION); 1 a
criterion failed, production unchanged; 2 usage (bad option, --against missing while
production is set, --rollback on a promotion that is not one, --accept-loss without
--rollback, --local without --dry-run, a --seed outside 0 .. 2**32 - 1 or a --bootstrap over
100,000); 3 not found (version, contract, artifact, evaluation set); 4 bad input (contract,
card, params, embeddings, an invalid version name, a --local version registered with other
weights, a served map whose card names other versions or weights than it serves); 5 registry
or promotion-log database unreachable; 6
production is not at --against (moved meanwhile, or unset; a dry run too), a rollback without
--rollback, a write conflict that persisted."""


def promote_cmd(
    version: str = typer.Argument(..., metavar="VERSION", help="the candidate version"),
    against: str | None = typer.Option(
        None,
        "--against",
        help="the version production must still point at (compare-and-set); `none` (or omitted) for the first promotion, while production is unset",
    ),
    rollback: bool = typer.Option(
        False,
        "--rollback",
        help="VERSION is not a descendant of production: gate it as a rollback (also on production's rows) and log it as one",
    ),
    paragon: str | None = typer.Option(
        None,
        help="version to measure the update gain against (default: the contract's paragon, else params.yaml evaluate.paragon)",
    ),
    accept_loss: str | None = typer.Option(
        None,
        "--accept-loss",
        metavar="WHY",
        help="a rollback: accept the failed rollback checks as measured; WHY is logged with who",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="evaluate and print the verdict; write nothing"
    ),
    local: list[str] = typer.Option(
        [],
        "--local",
        metavar="VERSION",
        help="with --dry-run: read VERSION from files instead of the registry (repeatable)",
    ),
    embeddings_dir: Path | None = typer.Option(
        None,
        "--embeddings-dir",
        help="with --local: read each local version from <dir>/<version>.npz instead of models/",
    ),
    bootstrap: int = typer.Option(
        1000, min=0, help="bootstrap resamples over queries (0: no confidence bounds)"
    ),
    seed: int = typer.Option(0, help="seed of the bootstrap resamples"),
    gallery: Path | None = typer.Option(
        None,
        "--gallery",
        metavar="TABLE",
        help="the LanceDB table (<folder>/<name>.lance) VERSION will serve: its rows checked "
        "against the gate, its version tagged and logged with the move (docs/lancedb.md)",
    ),
    contracts: Path = typer.Option(Path("contracts"), help="folder of contracts (<version>.yaml)"),
    models: Path = typer.Option(
        Path("models"), help="folder of trained versions (models/<version>/)"
    ),
    params: Path = typer.Option(
        Path("params.yaml"), help="params file whose evaluate.paragon names a default paragon"
    ),
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
    from compat.registry.promote import Paths, promote

    paths = Paths(
        contracts=contracts,
        models=models,
        eval_manifest=eval_manifest,
        source=source,
        cache=cache,
        params=params,
    )
    with exit_on_error(on_error=_summarize_error(f"compat promote {version}")):
        check_bootstrap_options(bootstrap, seed, "--bootstrap")  # before any evaluation
        if embeddings_dir is not None and not local:
            from compat.errors import UsageError

            raise UsageError("--embeddings-dir: names the bundles of --local versions")
        reg = named_registry(uri, read=dry_run)  # a dry run records nothing: it only reads
        bundles = {v: embeddings_dir / f"{v}.npz" for v in local} if embeddings_dir else {}
        if gallery is not None:  # the table's rows, read before the gate (compat.registry.gallery)
            from compat.registry.gallery import GalleryGate

            gate = GalleryGate(gallery, version)
        outcome = promote(
            version,
            against,
            reg=reg,
            paths=paths,
            paragon=paragon,
            resamples=bootstrap,
            seed=seed,
            dry_run=dry_run,
            rollback=rollback,
            accept_loss=accept_loss,
            local=local,
            embeddings=bundles,
            gallery=gate if gallery is not None else None,
        )
        # the version's run (registered before any verdict): linked on a dry run too, so a
        # pull request's summary leads to the candidate's training and evaluation
        run_id = None if version in local else reg.get(version).run_id
        run_url = reg.run_url(run_id)
    if outcome.report.get("gallery"):
        from compat.registry.gallery import GalleryRecord, describe, tag_name

        record = GalleryRecord(**outcome.report["gallery"])
        if outcome.moved:
            record.tag = tag_name(version, record.table_version)
        outcome.messages.append(describe(record))
    report = {
        **outcome.report,
        "moved": outcome.moved,
        "would_move": outcome.would_move,
        "messages": outcome.messages,
        "warnings": outcome.warnings,
        "checks": outcome.verdict.checks(),
        "run_id": run_id,
        "run_url": run_url,
    }
    for w in outcome.warnings:
        warn(w)
    output.append_step_summary(output.promote_summary(report, run_url))
    if as_json:
        output.echo_json(report)
    else:
        _print_verdict(report)
    raise typer.Exit(outcome.exit_code)


promote_cmd.__doc__ = PROMOTE_HELP


def _summarize_error(command: str) -> Any:
    def write(err: Any) -> None:
        output.append_step_summary(output.error_summary(command, err.message, err.exit_code))

    return write


def _print_verdict(report: dict[str, Any]) -> None:
    """The checks, gains and messages, then one last line: ``PASSED`` or ``FAILED`` and what
    happened to production (a dry run says what the real run would do)."""
    from rich.text import Text

    rollback = report.get("rollback")
    if not report["checks"]:
        output.say(f"{report['version']} has no parent: no criteria to check")
    else:
        if rollback:
            title = f"{report['version']}: rollback from {rollback['from']}"
        else:
            title = f"{report['version']} vs {report['parent']}"
        print_checks(report["checks"], title + (" (dry run)" if report["dry_run"] else ""))
    for protocol, per in report["gain"].items():
        for metric, g in per.items():
            output.say(output.gain_line(protocol, metric, g))
    for msg in report["messages"]:
        output.say(msg)
    if report.get("run_url"):
        output.say(f"MLflow run: {report['run_url']}")
    word, style = ("PASSED", "green") if report["passed"] else ("FAILED", "red")
    output.console().print(Text.assemble((word, style), ": " + output.outcome_text(report)))


def unregister_cmd(
    version: str = typer.Argument(..., metavar="VERSION", help="the registered version to delete"),
    why: str = typer.Option(..., "--why", help="why the registration is undone (logged)"),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Undo a registration: delete VERSION's registered model version (its run stays, tagged
    compat.unregistered) and log it (kind unregister, who, when, why) in the promotion log.

    Refused for a version that is or was production, or that another registered version names
    as its parent: the registry's history is never rewritten.

    Exit codes: 0 unregistered; 2 usage (bad option, an empty --why); 3 not found (VERSION not
    registered); 4 an invalid version name; 5 registry or promotion-log database unreachable,
    the promotion lock not acquired; 6 refused: VERSION is or was production, or is another
    registered version's parent."""
    from compat.registry.unregister import unregister

    with exit_on_error():
        entry = unregister(named_registry(uri), version, why)
    if as_json:
        output.echo_json({**entry, "mlflow_version": output.as_int(entry["mlflow_version"])})
        return
    typer.echo(
        f"{version}: unregistered (MLflow version {entry['mlflow_version']} deleted; its run "
        f"stays), logged by {entry['who']}: {why}"
    )


def register(app: typer.Typer) -> None:
    app.command("register")(register_cmd)
    app.command("promote")(promote_cmd)
    app.command("unregister")(unregister_cmd)
