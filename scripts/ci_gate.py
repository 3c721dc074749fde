#!/usr/bin/env python3
"""The CI gate (.github/workflows/compat-gate.yml): pull, register, promote.

    python scripts/ci_gate.py [CANDIDATE] [--dry-run] [--no-pull] [--embeddings-dir DIR]
                              [--contracts DIR] [--params FILE] [--bootstrap N] [--report DIR]

1. The candidate is CANDIDATE, else the newest contract in ``--contracts`` (natural order).
2. Every version its gate needs is listed: its parent, its ``transitive`` ancestors and its
   paragon (the contract's, else ``--params`` ``evaluate.paragon``), then theirs, and so on.
3. The trained versions are restored from the DVC remote with ``dvc pull`` instead of
   retraining: every output ``dvc.lock`` records (the evaluation images and split the gate
   embeds, ``models/<v>/``, psi); with ``--embeddings-dir``, only the bundles
   ``<dir>/<v>.npz`` of the needed versions.
4. Each is registered, ancestors first, with its contract from ``--contracts``: identical
   weights are a no-op; other weights under a registered name stop the gate (exit 4, naming
   both digests).
5. ``compat promote CANDIDATE --against <production now>`` (``none`` while production is unset)
   with the same ``--contracts``, ``--params`` and ``--bootstrap``: the compare-and-set moves
   production only from the version read here; ``--dry-run`` on pull requests records nothing.
   The verdict is printed as markdown; with ``--report DIR`` it is also written into DIR as
   ``gate-report.json`` (what ``compat promote --json`` prints, or the error) and as
   ``gate-report`` in markdown (the step summary), which the workflow uploads.

Every option is passed on to what it names (tests/registry/test_ci_gate.py fails when one is
accepted but ignored). The exit code is compat's (0 pass, 1 a criterion failed, 2 usage,
3 not found, 4 bad input, 5 registry unreachable, 6 production moved meanwhile); ``dvc pull``
failing is 5.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def natural(name: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def newest_contract(contracts: Path) -> str:
    names = sorted((p.stem for p in contracts.glob("*.yaml")), key=natural)
    if not names:
        sys.exit(f"error: {contracts}: no contract to gate")
    return names[-1]


def needed_versions(candidate: str, contracts: Path, params: Path) -> list[str]:
    """The candidate and every version its gate reads, ancestors before their descendants."""
    from compat.contracts.schema import load_contract
    from compat.registry.promote import params_paragon

    order: list[str] = []
    seen: set[str] = set()

    def visit(version: str) -> None:
        if version in seen:
            return
        seen.add(version)
        path = contracts / f"{version}.yaml"
        if path.is_file():
            c = load_contract(path)
            paragon = c.paragon or params_paragon(params, version)
            for other in [c.parent, *c.transitive, paragon]:
                if other:
                    visit(other)
        order.append(version)

    visit(candidate)
    return order


@dataclass
class Ran:
    returncode: int
    stdout: str = ""
    stderr: str = ""


def compat(*args: str, capture: bool = False) -> Ran:
    """``compat ARGS`` in this process (mlflow is imported once for the whole gate, not once
    per command); ``capture``: return its stdout and stderr instead of printing them."""
    import click

    from compat.cli.main import app

    print("+ compat " + " ".join(args), flush=True)
    out, err = (io.StringIO(), io.StringIO()) if capture else (sys.stdout, sys.stderr)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = app(list(args), prog_name="compat", standalone_mode=False) or 0
        except click.ClickException as e:  # a usage error: click's message, exit 2
            e.show()
            code = e.exit_code
        except click.exceptions.Abort:
            code = 1
    if not capture:
        return Ran(int(code))
    return Ran(int(code), out.getvalue(), err.getvalue())  # type: ignore[union-attr]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidate", nargs="?", help="version to gate (default: newest contract)")
    ap.add_argument("--dry-run", action="store_true", help="evaluate only; record nothing")
    ap.add_argument("--no-pull", action="store_true", help="the trained versions are here already")
    ap.add_argument("--embeddings-dir", type=Path, help="register versions from <dir>/<v>.npz")
    ap.add_argument("--contracts", type=Path, default=Path("contracts"), help="contracts folder")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file")
    ap.add_argument("--bootstrap", default="1000", help="bootstrap resamples of the gate")
    ap.add_argument("--report", type=Path, help="write gate-report.json and gate-report.md here")
    return ap


def write_report(folder: Path, run: Ran, command: str) -> None:
    """gate-report.json (promote's JSON, or the error) and gate-report.md (the summary)."""
    from compat.cli.output import error_summary, promote_summary

    folder.mkdir(parents=True, exist_ok=True)
    try:
        report = json.loads(run.stdout)
        markdown = promote_summary(report, report.get("run_url"))
    except ValueError:  # no verdict: the command stopped with an error
        message = (run.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("error: ")
        report = {"error": message, "exit_code": run.returncode}
        markdown = error_summary(command, message, run.returncode)
    (folder / "gate-report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (folder / "gate-report.md").write_text(markdown)


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)

    from compat.errors import CompatError

    candidate = a.candidate or newest_contract(a.contracts)
    try:
        versions = needed_versions(candidate, a.contracts, a.params)
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    print(f"candidate {candidate}; registering {' '.join(versions)}", flush=True)

    def source(v: str) -> str:
        return str(a.embeddings_dir / f"{v}.npz") if a.embeddings_dir else f"models/{v}"

    if not a.no_pull:
        # The pipeline's outputs (data, splits, models/<v>/, psi) as dvc.lock records them;
        # with --embeddings-dir, only the bundles the gate needs.
        targets = [source(v) for v in versions] if a.embeddings_dir else []
        print("+ dvc pull " + " ".join(targets), flush=True)
        if subprocess.run([sys.executable, "-m", "dvc", "pull", *targets]).returncode:
            print(
                "error: dvc pull failed (is the DVC remote configured and reachable?)",
                file=sys.stderr,
            )
            return 5
    for v in versions:
        extra = ["--embeddings", source(v)] if a.embeddings_dir else []
        code = compat("register", v, "--contracts", str(a.contracts), *extra).returncode
        if code:
            return code
    from compat.registry.store import Registry

    try:
        production = Registry().production()  # MLFLOW_TRACKING_URI, else registry/
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    against = production or "none"
    gate = ["promote", candidate, "--against", against, "--bootstrap", a.bootstrap]
    gate += ["--contracts", str(a.contracts), "--params", str(a.params)]
    gate += ["--dry-run"] if a.dry_run else []
    if a.report is None:
        return compat(*gate).returncode
    run = compat(*gate, "--json", capture=True)
    sys.stderr.write(run.stderr)
    write_report(a.report, run, f"compat promote {candidate}")
    print((a.report / "gate-report.md").read_text(), flush=True)
    print(f"gate report: {a.report / 'gate-report.json'}, {a.report / 'gate-report.md'}")
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
