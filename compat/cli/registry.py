"""Registry commands: register, promote, versions, show, chain, log, verify.

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
from compat.cli.common import exit_on_error, quiet_mlflow_logs, require_project

REGISTRY_ROOT = Path("registry")


def _registry(uri: str | None, read: bool = False) -> Any:
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


def _store_missing(reg: Any) -> bool:
    """Whether the registry is the local one and its database does not exist yet (a damaged
    one is exit 5: ``Registry.local_store_exists``)."""
    return reg.is_local and not reg.local_store_exists()


def _no_store_error(reg: Any) -> Exception:
    from compat.errors import NotFoundError

    return NotFoundError(
        f"{reg.root / 'mlflow.db'}: no registry yet: nothing is registered (compat register <version>)"
    )


def _echo_json(obj: Any) -> None:
    output.echo_json(obj)


def _console() -> Any:
    return output.console()


UriOption = typer.Option(
    None,
    "--registry-uri",
    envvar="MLFLOW_TRACKING_URI",
    help="MLflow tracking URI (default: sqlite under registry/)",
)
JsonOption = typer.Option(False, "--json", help="print one JSON object")


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
        rec, created = register(_registry(uri), version, models, contracts, embeddings)
    if as_json:
        _echo_json(
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
version served since VERSION last was) embedded: M(VERSION, production) against
M(production, production), on the contract's rollback criteria.

Exit codes: 0 every criterion passed (production moved, or already pointed at VERSION); 1 a
criterion failed, production unchanged; 2 usage (bad option, --against missing while
production is set, --rollback on a promotion that is not one); 3 not found (version, contract,
artifact, evaluation set); 4 bad input (contract, card, params, embeddings, an invalid version
name); 5 registry or promotion-log database unreachable; 6 production is not at --against
(moved meanwhile, or unset), a rollback without --rollback, a write conflict that persisted."""


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
    dry_run: bool = typer.Option(
        False, "--dry-run", help="evaluate and print the verdict; write nothing"
    ),
    bootstrap: int = typer.Option(
        1000, min=0, help="bootstrap resamples over queries (0: no confidence bounds)"
    ),
    seed: int = typer.Option(0, help="seed of the bootstrap resamples"),
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
        reg = _registry(uri, read=dry_run)  # a dry run records nothing: it only reads
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
        )
        # the version's run (registered before any verdict): linked on a dry run too, so a
        # pull request's summary leads to the candidate's training and evaluation
        run_id = reg.get(version).run_id
        run_url = reg.run_url(run_id)
    report = {
        **outcome.report,
        "moved": outcome.moved,
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
        _echo_json(report)
    else:
        _print_verdict(report)
    raise typer.Exit(outcome.exit_code)


promote_cmd.__doc__ = PROMOTE_HELP


def warn(message: str) -> None:
    """A warning (drift, a log not read): always one line on stderr, in every command."""
    typer.echo(f"warning: {message}", err=True)


def _summarize_error(command: str) -> Any:
    def write(err: Any) -> None:
        output.append_step_summary(output.error_summary(command, err.message, err.exit_code))

    return write


def print_checks(checks: list[dict[str, Any]], title: str, query: list[str] | None = None) -> None:
    """Checks as one table (:func:`compat.cli.output.check_cells`); ``query``: a first column
    naming each row's query version (``chain``)."""
    columns = list(output.CHECK_COLUMNS)
    rows = [output.check_cells(c) for c in checks]
    if query is not None:
        columns = [output.Column("query"), *columns]
        rows = [[q, *r] for q, r in zip(query, rows, strict=True)]
    output.print_table(columns, rows, title=title)


def _print_verdict(report: dict[str, Any]) -> None:
    from rich.text import Text

    console = _console()
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
    if report["dry_run"]:
        output.say("dry run: nothing recorded")
    elif report["passed"]:
        moved = f": production -> {report['version']}" if report["moved"] else ""
        kind = " (rollback)" if rollback and report["moved"] else ""
        console.print(Text.assemble(("PASSED", "green"), moved + kind))
    else:
        console.print(Text.assemble(("FAILED", "red"), ": production unchanged"))


def versions_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """List registered versions with parent, status and alias.

    Exit codes: 0 success (also when nothing is registered yet); 2 usage (bad option); 3 not a
    compat project and no --registry-uri, or the folder of a sqlite:/// URI does not exist; 5
    registry unreachable or its database damaged."""
    with exit_on_error():
        reg = _registry(uri, read=True)
        records = [] if _store_missing(reg) else reg.versions()
        if records:
            _warn_drift(reg)
    rows = [
        {
            "version": r.name,
            "mlflow_version": output.as_int(r.mlflow_version),
            "parent": r.parent,
            "status": r.status,
            "method": r.tags.get("compat.method") or None,
            "dim": output.as_int(r.tags.get("compat.dim")),
            "production": "production" in r.aliases,
        }
        for r in records
    ]
    if as_json:
        _echo_json({"versions": rows})
        return
    if not rows:
        output.say("no versions registered")
        return
    output.print_table(
        (
            "version",
            "mlflow",
            "parent",
            "method",
            output.Column("dim", numeric=True),
            "status",
            "alias",
        ),
        [
            [
                r["version"],
                output.human(r["mlflow_version"]),
                output.human(r["parent"]),
                output.human(r["method"]),
                output.human(r["dim"]),
                r["status"],
                "production" if r["production"] else "",
            ]
            for r in rows
        ],
        title="registered versions",
    )


def show_cmd(
    version: str = typer.Argument(
        ..., metavar="VERSION", help="the registered version to show, e.g. v2"
    ),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Show one version: tags, description, alias.

    Exit codes: 0 success; 2 usage (bad option); 3 not found (not a compat project and no
    --registry-uri, no registry yet, VERSION not registered); 4 an invalid version name; 5
    registry unreachable or its database damaged."""
    from compat.registry.record import checks_from_tags, gains_from_tags

    with exit_on_error():
        reg = _registry(uri, read=True)
        if _store_missing(reg):
            raise _no_store_error(reg)
        rec = reg.get(version)
        prod = reg.production_mlflow_version()
        _warn_drift(reg)
    info = {
        "version": rec.name,
        "mlflow_version": output.as_int(rec.mlflow_version),
        "run_id": rec.run_id,
        "source": rec.source,
        "production": prod == rec.mlflow_version,
        "parent": rec.parent,
        "status": rec.status,
        "dim": output.as_int(rec.tags.get("compat.dim")),
        "checks": checks_from_tags(rec.tags),
        "verdict_kind": rec.tags.get("compat.verdict.kind") or None,
        "gain": gains_from_tags(rec.tags),
        "tags": rec.tags,
        "description": rec.description,
    }
    if as_json:
        _echo_json(info)
        return
    from compat.registry.record import CHECKS_TAG, GAINS_TAG

    fields = [
        ["production", output.human(info["production"])],
        ["run", output.human(rec.run_id)],
    ]
    from compat.registry.integrity import FILES_TAG, recorded_summary

    fields += [
        [k, rec.tags[k] or "-"]
        for k in sorted(rec.tags)
        if k not in (CHECKS_TAG, GAINS_TAG, FILES_TAG)
    ]
    if FILES_TAG in rec.tags:  # one digest per file of the model: the count, not the digests
        fields.append([FILES_TAG, recorded_summary(rec)])
    output.print_table(
        ("field", "value"),
        fields,
        title=f"{version} (MLflow version {rec.mlflow_version})",
        show_header=False,
    )
    if info["checks"]:
        print_checks(info["checks"], f"{version}: recorded checks")
    for protocol, per in info["gain"].items():
        for metric, g in per.items():
            if metric != "*":  # a verdict recorded before compat.gains: the tag row says it
                output.say(output.gain_line(protocol, metric, g))
    if rec.description:
        output.say(rec.description)


CHAIN_STYLES = {"pass": ("pass", "green"), "fail": ("FAIL", "red")}


def chain_cmd(
    version: str | None = typer.Argument(
        None,
        metavar="VERSION",
        help="the version whose lineage to show (default: the production version)",
    ),
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
) -> None:
    """Lineage of a version with the recorded verdict of every (version, ancestor) pair.

    Exit codes: 0 success; 2 usage (bad option); 3 not found (not a compat project and no
    --registry-uri, no registry yet, the version not registered, no version given while
    production is unset); 4 an invalid version name; 5 registry unreachable or its database
    damaged."""
    from compat.registry.chain import lineage

    with exit_on_error():
        reg = _registry(uri, read=True)
        if _store_missing(reg):
            raise _no_store_error(reg)
        result = lineage(reg, version)
        _warn_drift(reg)
    if as_json:
        _echo_json(result)
        return
    output.say(" -> ".join(result["lineage"]))
    rows = []
    for p in result["pairs"]:
        text, style = CHAIN_STYLES.get(p["verdict"], (p["verdict"], "yellow"))
        rows.append([p["query"], p["gallery"], p["kind"], p["serve"], output.Styled(text, style)])
    output.print_table(("query", "gallery", "kind", "served", "verdict"), rows, title="pairs")
    checks = [(p["query"], c) for p in result["pairs"] for c in p["checks"]]
    if checks:
        print_checks([c for _, c in checks], "checks", query=[q for q, _ in checks])


def log_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """The promotion log: who moved production, when, from what to what.

    Exit codes: 0 success (also when nothing was promoted yet); 2 usage (bad option); 3 not a
    compat project and no --registry-uri, or the folder of a sqlite:/// URI does not exist; 5
    the registry or the promotion-log database unreachable."""
    with exit_on_error():
        reg = _registry(uri, read=True)
        entries = [] if _store_missing(reg) else reg.ledger().promotions()
        if not _store_missing(reg):
            _warn_drift(reg, entries)
    if as_json:
        _echo_json({"promotions": entries})
        return
    if not entries:
        output.say("no promotions yet")
        return
    output.print_table(
        ("when", "who", "kind", "from", "to", "state", "contract", "report"),
        [
            [
                e["when"],
                e["who"],
                e.get("kind") or "promotion",
                output.human(e.get("from")) if e.get("from") else "(unset)",
                e["to"],
                e["state"] + (" (recovered)" if e.get("recovered") else ""),
                (e.get("contract_sha256") or "-")[:12],
                (e.get("report_sha256") or "-")[:12],
            ]
            for e in entries
        ],
        title="promotions",
    )


def _warn_drift(reg: Any, entries: list[dict[str, Any]] | None = None) -> None:
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


def verify_cmd(
    uri: str | None = UriOption,
    as_json: bool = JsonOption,
    repair: bool = typer.Option(
        False,
        "--repair",
        help="fix what a killed promotion left (a torn log line, a pending record, production's "
        "status tag) under the promotion lock, then verify; never moves production",
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        metavar="VERSION",
        help="instead: download VERSION's model (or @production's) from the artifact store and "
        "compare every file with the sha256 recorded at registration (exit 4 naming a changed "
        "file); run it before mlflow.pyfunc.load_model, which runs the model's code",
    ),
) -> None:
    """Check `production` against the promotion log, or a model's files against registration.

    Checks that `production` is where the promotion log's last committed move put it, and
    that no killed promotion left a half-written state (exit 6 naming it; --repair fixes it).
    With --model VERSION: checks that model's files instead (exit 4 naming a changed one).

    Exit codes: 0 production is where the log says and nothing is half-written (with --model:
    every file matches); 2 usage (--model with --repair); 3 not found (not a compat project
    and no --registry-uri, no registry yet, --model's version not registered); 4 with
    --model, a file changed since registration (named), or an invalid version name; 5 the
    registry or the promotion-log database unreachable, the promotion lock not acquired; 6
    drift (production is not where the log's last committed move put it) or what a killed
    promotion left (a torn log line, a pending record, a stale status: --repair fixes it)."""
    from compat.registry.drift import DriftError, verify
    from compat.registry.integrity import ModelChanged

    def failed(err: Any) -> None:
        # --json always prints one object: a registry that cannot be read is one too (its
        # fields unknown, ``error`` the exit code), so a script parses stdout in every case
        if as_json:
            changed = err.result if isinstance(err, ModelChanged) else None
            _echo_json(
                {
                    **dict.fromkeys(VERIFY_FIELDS),
                    "model": changed,
                    "message": err.message,
                    "error": err.exit_code,
                }
            )

    with exit_on_error(failed):
        reg = _registry(uri, read=not repair)
        if _store_missing(reg):
            raise _no_store_error(reg)
        if model is not None:
            _verify_model(reg, model, repair, as_json)
            return
        try:
            result = verify(reg, repair=repair)
        except DriftError as err:
            if not as_json:
                raise
            # A script gets the same object either way; the exit code still says drift.
            _echo_json(
                {**err.result, "model": None, "message": err.message, "error": err.exit_code}
            )
            raise typer.Exit(err.exit_code) from None
    if as_json:
        _echo_json({**result, "model": None, "message": None, "error": None})
        return
    for line in result["repaired"]:
        output.say(f"repaired: {line}")
    where = result["production"] or "unset"
    typer.echo(f"production is {where}, as the promotion log says ({result['log']})")


# The fields of ``compat verify --json`` besides ``model``, ``message`` and ``error``.
VERIFY_FIELDS = ("production", "logged", "log", "registry", "drift", "problems", "repaired")


def _verify_model(reg: Any, name: str, repair: bool, as_json: bool) -> None:
    """``compat verify --model``: the model's files against the digests recorded at
    registration (compat.registry.integrity); ModelChanged (exit 4) names a changed file."""
    from compat.errors import UsageError
    from compat.registry.integrity import verify_model

    if repair:
        raise UsageError(
            "--model checks a model's files and --repair the promotion log: one at a time"
        )
    check = verify_model(reg, name)
    if check.warning:
        warn(check.warning)
    if as_json:
        fields = {**dict.fromkeys(VERIFY_FIELDS), "registry": reg.safe_uri}
        _echo_json({**fields, "model": check.to_json(), "message": None, "error": None})
        return
    folders: dict[str, int] = {}
    for path in check.checked:
        top, _, rest = path.partition("/")
        if rest:
            folders[top] = folders.get(top, 0) + 1
        else:
            typer.echo(f"ok  {path}")
    for top, count in folders.items():
        typer.echo(f"ok  {top}/ ({count} files)")
    what = "the sha256 recorded at registration" if check.recorded else "compat.weights_sha256"
    typer.echo(
        f"{check.version} (MLflow version {check.mlflow_version}): {len(check.checked)} file(s) "
        f"match {what}"
    )


def register(app: typer.Typer) -> None:
    app.command("register")(register_cmd)
    app.command("promote")(promote_cmd)
    app.command("versions")(versions_cmd)
    app.command("show")(show_cmd)
    app.command("chain")(chain_cmd)
    app.command("log")(log_cmd)
    app.command("verify")(verify_cmd)
