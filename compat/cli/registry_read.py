"""The commands that read the registry: ``compat versions``, ``show``, ``chain``, ``log`` and
``verify`` (``verify --repair`` alone writes: what a killed promotion left). They open the
registry read-only, through the reader that imports no mlflow where it can
(:func:`compat.cli.registry.named_registry`), and warn on stderr when the production alias
drifted from the promotion log. What they share with the write commands is
:mod:`compat.cli.registry`.
"""

from __future__ import annotations

from typing import Any

import typer

from compat.cli import output
from compat.cli.common import exit_on_error
from compat.cli.registry import (
    JsonOption,
    UriOption,
    named_registry,
    no_store_error,
    print_checks,
    store_missing,
    warn,
    warn_drift,
)


def versions_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """List registered versions with parent, status and alias.

    Exit codes: 0 success (also when nothing is registered yet); 2 usage (bad option); 3 not a
    compat project and no --registry-uri, or the folder of a sqlite:/// URI does not exist; 5
    registry unreachable or its database damaged."""
    with exit_on_error():
        reg = named_registry(uri, read=True)
        records = [] if store_missing(reg) else reg.versions()
        if records:
            warn_drift(reg)
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
        output.echo_json({"versions": rows})
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
    --registry-uri, no registry yet, VERSION not registered); 4 an invalid version name, or a
    verdict tag (compat.checks, compat.gains) that does not parse, named; 5 registry
    unreachable or its database damaged."""
    from compat.registry.tags import checks_from_tags, gains_from_tags

    with exit_on_error():
        reg = named_registry(uri, read=True)
        if store_missing(reg):
            raise no_store_error(reg)
        rec = reg.get(version)
        prod = reg.production_mlflow_version()
        warn_drift(reg)
        gallery = _gallery(reg, rec.name)
        # the verdict tags, typed: one edited by hand into something else is exit 4 naming it
        checks = checks_from_tags(rec.tags, version=rec.name)
        gains = gains_from_tags(rec.tags, rec.name)
    info = {
        "version": rec.name,
        "mlflow_version": output.as_int(rec.mlflow_version),
        "run_id": rec.run_id,
        "source": rec.source,
        "production": prod == rec.mlflow_version,
        "parent": rec.parent,
        "status": rec.status,
        "dim": output.as_int(rec.tags.get("compat.dim")),
        "checks": checks,
        "verdict_kind": rec.tags.get("compat.verdict.kind") or None,
        "verdict_passed": {"true": True, "false": False}.get(
            rec.tags.get("compat.verdict.passed", "")
        ),
        "gain": gains,
        "tags": rec.tags,
        "description": rec.description,
        "gallery": gallery.model_dump() if gallery is not None else None,
    }
    if as_json:
        output.echo_json(info)
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
    if gallery is not None:
        from compat.registry.gallery import describe

        output.say(f"last promoted with {describe(gallery)}")


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
    production is unset); 4 an invalid version name, or a verdict tag (compat.checks) that
    does not parse, named; 5 registry unreachable or its database damaged."""
    from compat.registry.chain import lineage

    with exit_on_error():
        reg = named_registry(uri, read=True)
        if store_missing(reg):
            raise no_store_error(reg)
        result = lineage(reg, version)
        warn_drift(reg)
        gallery = _gallery(reg, result["version"])
    result["gallery"] = gallery.model_dump() if gallery is not None else None
    if as_json:
        output.echo_json(result)
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
    if gallery is not None:
        from compat.registry.gallery import describe

        output.say(f"{result['version']} last promoted with {describe(gallery)}")


def log_cmd(uri: str | None = UriOption, as_json: bool = JsonOption) -> None:
    """The promotion log: who moved production, when, from what to what (and each version
    `compat unregister` deleted: kind unregister, its version in the `to` column).

    Exit codes: 0 success (also when nothing was promoted yet); 2 usage (bad option); 3 not a
    compat project and no --registry-uri, or the folder of a sqlite:/// URI does not exist; 4
    a log line that does not parse (named by file and line, or table and row); 5 the registry
    or the promotion-log database unreachable."""
    with exit_on_error():
        reg = named_registry(uri, read=True)
        entries = [] if store_missing(reg) else reg.ledger().promotions()
        if not store_missing(reg):
            warn_drift(reg, entries)
    if as_json:
        output.echo_json({"promotions": entries})
        return
    if not entries:
        output.say("no promotions yet")
        return
    output.print_table(
        ("when", "who", "kind", "from", "to", "state", "contract", "report", "gallery"),
        [
            [
                e["when"],
                e["who"],
                e.get("kind") or "promotion",
                output.human(e.get("from"))
                if e.get("from") or e.get("kind") == "unregister"
                else "(unset)",
                e.get("to") or e.get("version") or "-",
                e["state"] + (" (recovered)" if e.get("recovered") else ""),
                (e.get("contract_sha256") or "-")[:12],
                (e.get("report_sha256") or "-")[:12],
                _gallery_cell(e),
            ]
            for e in entries
        ],
        title="promotions",
    )


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
    --model, a file changed since registration (named), an invalid version name, or a log
    line that does not parse (named); 5 the
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
            output.echo_json(
                {
                    **dict.fromkeys(VERIFY_FIELDS),
                    "model": changed,
                    "message": err.message,
                    "error": err.exit_code,
                }
            )

    with exit_on_error(failed):
        reg = named_registry(uri, read=not repair)
        if store_missing(reg):
            raise no_store_error(reg)
        if model is not None:
            _verify_model(reg, model, repair, as_json)
            return
        try:
            result = verify(reg, repair=repair)
        except DriftError as err:
            if not as_json:
                raise
            # A script gets the same object either way; the exit code still says drift.
            output.echo_json(
                {**err.result, "model": None, "message": err.message, "error": err.exit_code}
            )
            raise typer.Exit(err.exit_code) from None
    if as_json:
        output.echo_json({**result, "model": None, "message": None, "error": None})
        return
    for line in result["repaired"]:
        output.say(f"repaired: {line}")
    where = result["production"] or "unset"
    typer.echo(f"production is {where}, as the promotion log says ({result['log']})")
    if result.get("gallery_record"):
        typer.echo(f"the gallery is as its promotion recorded: {result['gallery_record']}")


# The fields of ``compat verify --json`` besides ``model``, ``message`` and ``error``.
VERIFY_FIELDS = ("production", "logged", "log", "registry", "drift", "problems", "repaired",
                 "gallery", "gallery_record")  # fmt: skip


def _gallery(reg: Any, version: str) -> Any:
    """The gallery the last committed promotion to ``version`` recorded (typed), or None."""
    from compat.registry.gallery import last_gallery

    return last_gallery(reg.ledger().promotions(), version)[0]


def _gallery_cell(entry: dict[str, Any]) -> str:
    """A log line's gallery: ``<table>@<table version>``, or ``-``."""
    from pathlib import Path

    from compat.registry.gallery import record_of

    record = record_of(entry)
    return f"{Path(record.path).name}@{record.table_version}" if record is not None else "-"


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
        output.echo_json({**fields, "model": check.to_json(), "message": None, "error": None})
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
    app.command("versions")(versions_cmd)
    app.command("show")(show_cmd)
    app.command("chain")(chain_cmd)
    app.command("log")(log_cmd)
    app.command("verify")(verify_cmd)
