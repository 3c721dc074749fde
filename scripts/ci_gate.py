#!/usr/bin/env python3
"""The CI gate (.github/workflows/compat-gate.yml): a named candidate's verdict; a pull request
never writes the shared registry.

    python scripts/ci_gate.py [CANDIDATE] [--candidate-file FILE] [--dry-run] [--rollback]
                              [--accept-loss WHY] [--no-pull] [--embeddings-dir DIR]
                              [--contracts DIR] [--params FILE] [--bootstrap N] [--report DIR]
                              [--comment]

1. The candidate is named, never guessed: CANDIDATE (the workflow's dispatch input), else the
   first word of ``--candidate-file`` (default ``contracts/candidate.txt``, which a pull request
   proposing a release edits). Neither: exit 2.
2. A pull request from a fork (``GITHUB_EVENT_PATH`` names a head repository other than the
   base) gets no secrets, so it cannot read the registry or the DVC remote: the gate is skipped
   with exit 0 and says so in its report and the step summary, before anything else is done.
3. Every version the candidate's gate needs is listed: its parent, its ``transitive``
   ancestors and its paragon (the contract's, else ``--params`` ``evaluate.paragon``), then
   theirs. The pipeline's outputs are restored from the DVC remote with ``dvc pull`` instead of
   retraining (with ``--embeddings-dir``, only the bundles ``<dir>/<v>.npz`` of those versions).
4. ``--dry-run`` (pull requests): nothing is written to the registry. Production is read from
   it, read-only; a needed version it holds is judged as registered (when the pull request's
   files hold other weights under its name: exit 4, as its registration would be), and one it
   does not hold is judged from the pull request's own files (``compat promote --dry-run
   --local``). Re-running a pull request, or retraining its candidate, never collides with an
   earlier run. Without ``--dry-run`` (the protected branch, a manual dispatch): each needed
   version is registered, ancestors first (identical weights: a no-op), then production moves.
5. ``compat promote CANDIDATE --against <production now>`` (``none`` while it is unset) with the
   same ``--contracts``, ``--params`` and ``--bootstrap``, and ``--rollback`` /
   ``--accept-loss WHY`` for a rollback (a manual dispatch: docs/rollback.md). With ``--report
   DIR`` the verdict is written there as ``gate-report.json`` (``compat promote --json``, or the
   error, or why the gate was skipped) and ``gate-report.md`` (the step summary's markdown),
   which the workflow uploads; ``--comment`` posts that markdown on the pull request through the
   GitHub API (``GITHUB_TOKEN``, ``GITHUB_REPOSITORY``, the event's pull request number,
   ``GITHUB_API_URL``), editing the gate's earlier comment instead of adding one per run. A
   comment that cannot be posted is a warning, never the gate's exit code.

Every option is passed on to what it names (tests/registry/test_ci_gate.py fails when one is
accepted but ignored). The exit code is compat's (0 pass or skipped, 1 a criterion failed,
2 usage, 3 not found, 4 bad input, 5 registry unreachable, 6 production moved meanwhile);
``dvc pull`` failing is 5. docs/ci-gate.md walks through it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CANDIDATE_FILE = Path("contracts/candidate.txt")
MARKER = "<!-- compat-gate -->"  # the gate's own pull request comment: edited on each run


def read_candidate(path: Path) -> str | None:
    """The first word of ``path`` outside ``#`` comments; None when there is none."""
    if not path.is_file():
        return None
    for line in path.read_text(encoding="utf-8").splitlines():
        words = line.split("#", 1)[0].split()
        if words:
            return words[0]
    return None


def event() -> dict[str, Any]:
    """The GitHub event that started the job (``GITHUB_EVENT_PATH``); {} outside Actions."""
    path = os.environ.get("GITHUB_EVENT_PATH")
    if not path or not Path(path).is_file():
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def fork_pull_request() -> str | None:
    """The fork's name when the job runs for a pull request from another repository."""
    if os.environ.get("GITHUB_EVENT_NAME") not in ("pull_request", "pull_request_target"):
        return None
    pr = event().get("pull_request") or {}
    head = ((pr.get("head") or {}).get("repo") or {}).get("full_name")
    base = ((pr.get("base") or {}).get("repo") or {}).get("full_name")
    if base and head != base:
        return head or "a deleted fork"
    return None


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
    ap.add_argument("candidate", nargs="?", help="version to gate (default: --candidate-file)")
    ap.add_argument("--candidate-file", type=Path, default=CANDIDATE_FILE,
                    help="file whose first word names the candidate")  # fmt: skip
    ap.add_argument("--dry-run", action="store_true", help="judge only; write no registry")
    ap.add_argument("--rollback", action="store_true", help="the candidate is a rollback")
    ap.add_argument("--accept-loss", metavar="WHY", help="a rollback: accept its losses (logged)")
    ap.add_argument("--no-pull", action="store_true", help="the trained versions are here already")
    ap.add_argument("--embeddings-dir", type=Path, help="versions' bundles: <dir>/<v>.npz")
    ap.add_argument("--contracts", type=Path, default=Path("contracts"), help="contracts folder")
    ap.add_argument("--params", type=Path, default=Path("params.yaml"), help="params file")
    ap.add_argument("--bootstrap", default="1000", help="bootstrap resamples of the gate")
    ap.add_argument("--report", type=Path, help="write gate-report.json and gate-report.md here")
    ap.add_argument("--comment", action="store_true", help="post the verdict on the pull request")
    return ap


def verdict(run: Ran, command: str) -> tuple[dict[str, Any], str]:
    """The gate's report (promote's JSON, or the error) and its markdown (the summary's)."""
    from compat.cli.output import error_summary, promote_summary

    try:
        report = json.loads(run.stdout)
        return report, promote_summary(report, report.get("run_url"))
    except ValueError:  # no verdict: the command stopped with an error
        message = (run.stderr.strip().splitlines() or ["no output"])[-1].removeprefix("error: ")
        report = {"error": message, "exit_code": run.returncode}
        return report, error_summary(command, message, run.returncode)


def _write(folder: Path, report: dict[str, Any], markdown: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "gate-report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (folder / "gate-report.md").write_text(markdown)


def skipped(a: argparse.Namespace, why: str) -> int:
    """A gate that was not run: said in the report, the step summary and the log; exit 0."""
    markdown = f"### compat gate: skipped\n\n{why}\n\n"
    if a.report is not None:
        _write(a.report, {"skipped": why, "exit_code": 0}, markdown)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as f:
            f.write(markdown)
    print(f"skipped: {why}", flush=True)
    return 0


def github(method: str, url: str, token: str, body: dict[str, Any] | None = None) -> Any:
    """One GitHub REST call (10 s timeout); its JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Authorization", f"Bearer {token}")
    request.add_header("Accept", "application/vnd.github+json")
    request.add_header("X-GitHub-Api-Version", "2022-11-28")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read() or b"null")


def post_comment(markdown: str) -> str:
    """The verdict as the gate's comment on the pull request (its earlier one edited); what
    was done, in words. Never raises: a comment is a courtesy, the exit code is the verdict."""
    token, repo = os.environ.get("GITHUB_TOKEN"), os.environ.get("GITHUB_REPOSITORY")
    number = (event().get("pull_request") or {}).get("number")
    if not (token and repo and number):
        return "warning: no comment posted (not a pull request, or GITHUB_TOKEN unset)"
    api = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/")
    body = {"body": f"{MARKER}\n{markdown}"}
    try:
        comments = github("GET", f"{api}/repos/{repo}/issues/{number}/comments?per_page=100", token)
        ours = [c for c in comments or [] if MARKER in str(c.get("body", ""))]
        if ours:
            github("PATCH", f"{api}/repos/{repo}/issues/comments/{ours[-1]['id']}", token, body)
            return f"verdict comment edited on pull request #{number}"
        github("POST", f"{api}/repos/{repo}/issues/{number}/comments", token, body)
        return f"verdict posted on pull request #{number}"
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError) as err:
        return f"warning: no comment posted on pull request #{number}: {err}"


def split_versions(
    versions: list[str], a: argparse.Namespace
) -> tuple[str | None, list[str], list[str]]:
    """A dry run's view of the registry, read-only: (production, registered, local). A needed
    version the pull request holds under a registered name with other weights: BadInputError
    (exit 4), as its registration would be."""
    from compat.cli.registry import named_registry, store_missing
    from compat.registry.overlay import local_record, same_weights

    reg = named_registry(None, read=True)
    if store_missing(reg):  # no registry yet: every version comes from files
        return None, [], list(versions)
    production, registered, local = reg.production(), [], []
    for v in versions:
        rec = reg.find(v)
        if rec is None:
            local.append(v)
            continue
        registered.append(v)
        bundle = a.embeddings_dir / f"{v}.npz" if a.embeddings_dir else None
        if (bundle or Path("models") / v / "card.json").is_file():
            same_weights(rec, local_record(v, Path("models"), a.contracts, bundle))
    return production, registered, local


def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    fork = fork_pull_request()
    if fork is not None:
        return skipped(
            a,
            f"pull request from the fork {fork}: GitHub gives it no secrets, so the registry and "
            "the DVC remote cannot be read; a maintainer gates it from a branch of this "
            "repository (or by a manual dispatch after the merge).",
        )
    candidate = a.candidate or read_candidate(a.candidate_file)
    if not candidate:
        print(
            f"error: no candidate: name it (CANDIDATE, the workflow's candidate input) or write "
            f"it in {a.candidate_file}",
            file=sys.stderr,
        )
        return 2

    from compat.errors import CompatError

    try:
        versions = needed_versions(candidate, a.contracts, a.params)
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code

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
    extra: list[str] = []
    try:
        if a.dry_run:
            production, registered, local = split_versions(versions, a)
            print(
                f"candidate {candidate}; from the registry: {' '.join(registered) or '-'}; "
                f"from files: {' '.join(local) or '-'} (nothing is registered)",
                flush=True,
            )
            extra = [x for v in local for x in ("--local", v)]
            if local and a.embeddings_dir:
                extra += ["--embeddings-dir", str(a.embeddings_dir)]
        else:
            print(f"candidate {candidate}; registering {' '.join(versions)}", flush=True)
            for v in versions:
                emb = ["--embeddings", source(v)] if a.embeddings_dir else []
                code = compat("register", v, "--contracts", str(a.contracts), *emb).returncode
                if code:
                    return code
            from compat.registry.store import Registry

            production = Registry().production()  # MLFLOW_TRACKING_URI, else registry/
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    gate = ["promote", candidate, "--against", production or "none", "--bootstrap", a.bootstrap]
    gate += ["--contracts", str(a.contracts), "--params", str(a.params), *extra]
    gate += ["--dry-run"] if a.dry_run else []
    gate += ["--rollback"] if a.rollback else []
    gate += ["--accept-loss", a.accept_loss] if a.accept_loss is not None else []
    if a.report is None and not a.comment:
        return compat(*gate).returncode
    run = compat(*gate, "--json", capture=True)
    sys.stderr.write(run.stderr)
    report, markdown = verdict(run, f"compat promote {candidate}")
    print(markdown, flush=True)
    if a.report is not None:
        _write(a.report, report, markdown)
        print(f"gate report: {a.report / 'gate-report.json'}, {a.report / 'gate-report.md'}")
    if a.comment:
        print(post_comment(markdown), flush=True)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
