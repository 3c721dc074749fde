"""Choose a method's weight on the validation set, by the gate's lower bound; look at the
evaluation set once.

A sweep (``dvc exp run --queue -S 'train.v2.method_params.lam=...' validate``) evaluates each
candidate on ``splits/validation.json`` (classes disjoint from training and evaluation,
:mod:`compat.data.split`); the evaluate stage's ``compat.json`` holds, per check, the bootstrap
lower bound of the difference M(new, parent) - M(parent, parent): what the promotion gate
compares with its margin (docs/design.md, "Contracts"). A gate passes when *every* criterion's
lower bound clears its margin, so a candidate's score is its smallest lower bound over the
checks, and the pick is the candidate with the largest score (ties: the first listed). Only
then is the picked candidate evaluated on the evaluation set, once.

Usage (in the project folder)::

    dvc exp show --csv > sweep.csv
    python -m compat.evaluate.pick sweep.csv --param train.v2.method_params.lam \\
        --version v2 --parent v1 [--check identification/top1 --check identification/mAP]

prints one row per candidate, the pick, and the commands that apply it and run the evaluation.
Exit codes: 0 picked, 3 the file or a column is missing, 4 no candidate has a number.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compat.errors import BadInputError, CompatError, NotFoundError

DEFAULT_CHECKS = (("identification", "top1"), ("identification", "mAP"))


def lower_bound_key(protocol: str, metric: str, version: str, parent: str) -> str:
    """The key (dotted, as ``dvc exp show`` names metrics) of a check's lower bound in the
    evaluate stage's ``compat.json``."""
    return f"difference.{protocol}.{metric}.{version}.{parent}.lower_bound"


@dataclass
class Candidate:
    name: str  # the experiment (or revision)
    value: str  # the parameter's value
    bounds: dict[str, float | None]  # check -> lower bound (None: not a number)

    @property
    def score(self) -> float | None:
        """The binding check: the smallest lower bound; None when any is missing."""
        vals = list(self.bounds.values())
        if not vals or any(v is None for v in vals):
            return None
        return min(v for v in vals if v is not None)


@dataclass
class Pick:
    best: Candidate
    candidates: list[Candidate] = field(default_factory=list)


def pick(candidates: Sequence[Candidate]) -> Pick:
    """The candidate with the largest score (smallest lower bound over its checks); ties go to
    the first listed. BadInputError when no candidate has every lower bound."""
    scored = [c for c in candidates if c.score is not None]
    if not scored:
        raise BadInputError("pick: no candidate has a lower bound for every check")
    best = scored[0]
    for c in scored[1:]:
        if c.score > best.score:  # type: ignore[operator]
            best = c
    return Pick(best, list(candidates))


def _number(text: str | None) -> float | None:
    try:
        x = float(text) if text not in (None, "", "!", "-") else None
    except ValueError:
        return None
    return None if x is None or math.isnan(x) else x


def _column(header: list[str], key: str, where: str) -> str:
    """``key`` itself or ``<file>:key`` (``dvc exp show`` prefixes a file when names clash)."""
    hits = [h for h in header if h == key or h.endswith(":" + key)]
    if not hits:
        raise NotFoundError(
            f"{where}: no column {key!r} (is the validate stage's compat.json a metric?)"
        )
    return hits[0]


def candidates_from_csv(
    text: str,
    param: str,
    version: str,
    parent: str,
    checks: Sequence[tuple[str, str]] = DEFAULT_CHECKS,
    where: str = "csv",
) -> list[Candidate]:
    """Candidates from ``dvc exp show --csv``: the experiments (named rows); without any, every
    committed revision (the workspace row repeats the last run and is skipped)."""
    rows = list(csv.DictReader(io.StringIO(text)))
    header = list(rows[0].keys()) if rows else []
    if not header:
        raise BadInputError(f"{where}: empty")
    pcol = _column(header, param, where)
    cols = {
        f"{p}/{m}": _column(header, lower_bound_key(p, m, version, parent), where)
        for p, m in checks
    }
    named = [r for r in rows if r.get("Experiment")]
    chosen = named or [r for r in rows if r.get("rev") not in (None, "", "workspace")]
    return [
        Candidate(
            name=r.get("Experiment") or r.get("rev") or "?",
            value=r[pcol],
            bounds={check: _number(r[col]) for check, col in cols.items()},
        )
        for r in chosen
    ]


def format_pick(result: Pick, param: str) -> str:
    """The candidates as a table, then the pick and the next commands."""
    checks = list(result.candidates[0].bounds) if result.candidates else []
    head = f"| experiment | {param} | " + " | ".join(f"{c} lower bound" for c in checks) + " |"
    lines = [head, "|" + "---|" * (2 + len(checks))]
    for c in result.candidates:
        cells = ["n/a" if v is None else f"{v:+.4f}" for v in c.bounds.values()]
        mark = " (picked)" if c is result.best else ""
        lines.append(f"| {c.name}{mark} | {c.value} | " + " | ".join(cells) + " |")
    b = result.best
    lines += [
        "",
        f"picked {b.name}: {param}={b.value}, smallest lower bound {b.score:+.4f} on the "
        "validation set",
        f"next: dvc exp apply {b.name} && dvc repro evaluate   # the evaluation set, once",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", help="`dvc exp show --csv` output")
    parser.add_argument("--param", required=True, help="e.g. train.v2.method_params.lam")
    parser.add_argument("--version", required=True)
    parser.add_argument("--parent", required=True)
    parser.add_argument(
        "--check",
        action="append",
        help="protocol/metric (repeatable; default identification/top1 and identification/mAP)",
    )
    args = parser.parse_args([] if argv is None else argv)
    try:
        checks = [tuple(c.split("/", 1)) for c in args.check] if args.check else DEFAULT_CHECKS
        if any(len(c) != 2 for c in checks):
            raise BadInputError("--check: expected protocol/metric, e.g. identification/top1")
        path = Path(args.csv)
        if not path.is_file():
            raise NotFoundError(f"{path}: file not found")
        found = candidates_from_csv(
            path.read_text(encoding="utf-8"), args.param, args.version, args.parent,
            checks, str(path),  # type: ignore[arg-type]
        )  # fmt: skip
        result = pick(found)
    except CompatError as err:
        print(f"error: {err.message}", file=sys.stderr)
        return err.exit_code
    print(format_pick(result, args.param))
    return 0


__all__ = [
    "DEFAULT_CHECKS",
    "Candidate",
    "Pick",
    "candidates_from_csv",
    "format_pick",
    "lower_bound_key",
    "pick",
]

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
