"""Register and gate one method's sequence in its own registry, then show ``compat chain``.

For method M with chain M-t1 .. M-tT (evaluate.yaml), in ``gate/M/`` (a project folder of its
own, so each method's chain has its own ``production`` alias):

1. writes ``contracts/M-tk.yaml`` for every version from its model card (dim, head, parent):
   criterion ``identification top1: cross > self_parent``, ``transitive:`` every earlier task;
2. ``compat register M-tk`` for every version;
3. ``compat promote M-t1`` (opens production), then ``compat promote M-tk --against <production>``
   in order: the gate records the verdict of every (version, ancestor) pair on the version; a
   version that fails stays out of production and the next one is gated against what is;
4. ``compat chain M-tT``: the lineage with each pair's recorded verdict.

The commands are the real ``compat`` CLI, run in this process (one MLflow import instead of one
per command); ``--print`` only prints the equivalent shell commands. Exit code 0 when every
command ran (a failed criterion is a result, not an error), else the first error's code.
Usage (from experiments/sequence, after ``dvc repro``): ``python gate.py hoc [--bootstrap 200]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from compat.models.card import ModelCard, read_model_card

CRITERION = {"protocol": "identification", "metric": "top1", "require": "cross > self_parent"}


def contract_for(version: str, card: ModelCard, ancestors: list[str]) -> dict[str, Any]:
    """The contract of ``version``: its card's facts, the criterion, every older ancestor."""
    out: dict[str, Any] = {"version": version, "embedding_dim": card.dim, "head": card.head}
    parent = card.parent
    if parent:
        out["parent"] = parent
        out["criteria"] = [dict(CRITERION)]
        older = [a for a in ancestors if a != parent]
        if older:
            out["transitive"] = older
    return out


def write_contracts(chain: list[str], models: Path, contracts: Path) -> list[Path]:
    contracts.mkdir(parents=True, exist_ok=True)
    written = []
    for k, version in enumerate(chain):
        card = read_model_card(models / version)
        if k and card.parent != chain[k - 1]:
            # A version started from a pre-trained model (task 1, a replacement) has that model
            # as its card's parent; the registry checks contracts against cards, so gating it
            # would need the pre-trained models registered and gated as its parents.
            raise SystemExit(
                f"error: {version}: card parent {card.parent!r}, chain says {chain[k - 1]!r}; "
                "gate.py gates chains whose versions continue each other"
            )
        path = contracts / f"{version}.yaml"
        path.write_text(yaml.safe_dump(contract_for(version, card, chain[:k]), sort_keys=False))
        written.append(path)
    return written


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def compat(args: list[str], cwd: Path, dry: bool = False) -> int:
    """Run ``compat <args>`` in ``cwd`` through the real CLI (typer app); return its exit code."""
    print(f"$ (cd {cwd} && compat {shlex.join(args)})", flush=True)
    if dry:
        return 0
    import typer

    from compat.cli.main import app

    with _cwd(cwd):
        try:
            code = typer.main.get_command(app).main(args, prog_name="compat", standalone_mode=False)
        except SystemExit as err:  # click's own usage errors
            code = err.code
    sys.stdout.flush()
    return int(code or 0)


def gate(
    method: str,
    *,
    root: Path = Path("."),
    bootstrap: int = 200,
    dry: bool = False,
) -> int:
    """The whole flow for one method; returns 0 or the first unexpected exit code."""
    root = root.resolve()
    chain = yaml.safe_load((root / "evaluate.yaml").read_text())[method]["chain"]
    work = root / "gate" / method
    work.mkdir(parents=True, exist_ok=True)
    write_contracts(chain, root / "models", work / "contracts")
    # Explicit, so MLFLOW_TRACKING_URI (a team server) is never written by an experiment.
    uri = ["--registry-uri", f"sqlite:///{work / 'registry' / 'mlflow.db'}"]
    up = os.path.relpath(root, work)
    paths = [
        "--models", f"{up}/models",
        "--eval", f"{up}/splits/eval.json",
        "--source", f"{up}/data/source.json",
        "--cache", f"{up}/cache/embeddings/{method}",
        "--bootstrap", str(bootstrap),
    ]  # fmt: skip
    for version in chain:
        code = compat(["register", version, "--models", f"{up}/models", *uri], work, dry)
        if code:
            return code
    production = None
    for version in chain:
        against = ["--against", production] if production else []
        code = compat(["promote", version, *against, *paths, *uri], work, dry)
        if code == 0:
            production = version
        elif code != 1:  # 1: a criterion failed, recorded on the version; anything else is an error
            return code
    return compat(["chain", chain[-1], *uri], work, dry)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("methods", nargs="+", help="methods of evaluate.yaml, e.g. hoc er bct")
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--print", action="store_true", help="only print the commands")
    args = parser.parse_args(argv)
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    for method in args.methods:
        code = gate(method, bootstrap=args.bootstrap, dry=args.print)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
