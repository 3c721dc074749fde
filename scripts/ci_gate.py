#!/usr/bin/env python3
"""The CI gate (.github/workflows/compat-gate.yml): pull, register, promote.

    python scripts/ci_gate.py [CANDIDATE] [--dry-run] [--no-pull] [--embeddings-dir DIR]

1. The candidate is CANDIDATE, else the newest contract in ``contracts/`` (natural order).
2. Every version its gate needs is listed: its parent, its ``transitive`` ancestors and its
   paragon (the contract's, else ``params.yaml`` ``evaluate.paragon``), then theirs, and so on.
3. The trained versions are restored from the DVC remote with ``dvc pull`` instead of
   retraining: every output ``dvc.lock`` records (the evaluation images and split the gate
   embeds, ``models/<v>/``, psi); with ``--embeddings-dir``, only the bundles
   ``<dir>/<v>.npz`` of the needed versions.
4. Each is registered, ancestors first: identical weights are a no-op; other weights under a
   registered name stop the gate (exit 4, naming both digests).
5. ``compat promote CANDIDATE --against <production now>`` (``none`` while production is unset):
   the compare-and-set moves production only from the version read here; ``--dry-run`` on pull
   requests records nothing.

The exit code is compat's (0 pass, 1 a criterion failed, 2 usage, 3 not found, 4 bad input,
5 registry unreachable, 6 production moved meanwhile); ``dvc pull`` failing is 5.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
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


def compat(*args: str) -> int:
    print("+ compat " + " ".join(args), flush=True)
    return subprocess.run([sys.executable, "-m", "compat.cli.main", *args]).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("candidate", nargs="?")
    ap.add_argument("--dry-run", action="store_true", help="evaluate only; record nothing")
    ap.add_argument("--no-pull", action="store_true", help="the trained versions are here already")
    ap.add_argument("--embeddings-dir", type=Path, help="register versions from <dir>/<v>.npz")
    ap.add_argument("--contracts", type=Path, default=Path("contracts"))
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--bootstrap", default="1000")
    a = ap.parse_args(argv)

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
        code = compat("register", v, *extra)
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
    return compat(*gate, *(["--dry-run"] if a.dry_run else []))


if __name__ == "__main__":
    sys.exit(main())
