"""What each number of epochs per task buys, measured on the validation classes.

The reference code fine-tunes every task for 70 epochs; this experiment must fit in 30 minutes on
a 2-core CPU, so it runs as many epochs per task as that allows. This script measures what the
count buys before it is chosen, on ``splits/validation.json`` (50 classes disjoint from the
evaluation and training classes), never on the evaluation set.

For each count E it trains every chosen method's seven tasks with E epochs each (every other
setting as params.yaml gives it, the pipeline's pre-trained models reused as they are), then
evaluates each chain on the validation set with both galleries, as the pipeline's evaluate stage
does (``stages/evaluate.py --manifest splits/validation.json``). Each count works in
``cache/epochs/e<E>/`` (data and splits linked, the pre-trained models linked); a version whose
card already records the same config and parent is not trained again, so an interrupted run
resumes. Writes ``results/epochs.json`` (the numbers, the command, commit and machine) and
``results/epochs.md`` (:func:`render` of it; tests/sequence re-derives it).

Usage (from experiments/sequence, after ``dvc repro train-first``):
``python epochs.py --epochs 3 6 10 [--methods hoc er]``; ``python epochs.py --render`` only
rewrites results/epochs.md from results/epochs.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RESULTS = HERE / "results"
GALLERIES = {"instance": "", "template": "-template"}


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def chains(train: dict[str, Any], methods: list[str]) -> dict[str, list[str]]:
    """Each method's task versions in order (``<method>-t1`` ..), from params.yaml ``train``."""
    out = {}
    for method in methods:
        tasks = sorted(
            (v for v in train if v.startswith(f"{method}-t")), key=lambda v: int(v.split("-t")[1])
        )
        if not tasks:
            raise SystemExit(f"error: params.yaml: train has no {method}-t<k> versions")
        out[method] = tasks
    return out


def _link(target: Path, link: Path) -> None:
    if link.is_symlink() or link.exists():
        return
    link.symlink_to(os.path.relpath(target, link.parent))


def prepare(
    epochs: int, params: dict[str, Any], chain: dict[str, list[str]]
) -> tuple[Path, dict[str, Any]]:
    """``cache/epochs/e<E>/``: params.yaml with every task version at ``epochs``, links to the
    data, the splits and every pre-trained model the chains start from; (the folder, the
    ``train`` section it was given)."""
    work = HERE / "cache" / "epochs" / f"e{epochs}"
    (work / "models").mkdir(parents=True, exist_ok=True)
    for name in ("data", "splits"):
        _link(HERE / name, work / name)
    train = {k: dict(v) for k, v in params["train"].items()}
    tasks = {v for versions in chain.values() for v in versions}
    for version in tasks:
        train[version]["epochs"] = epochs
        parent = train[version].get("parent")
        if parent is not None and parent not in tasks:  # a pre-trained model: reuse it
            if not (HERE / "models" / parent / "card.json").is_file():
                raise SystemExit(
                    f"error: models/{parent}: missing; run `dvc repro train-first` first"
                )
            _link(HERE / "models" / parent, work / "models" / parent)
    (work / "params.yaml").write_text(yaml.safe_dump({**params, "train": train}, sort_keys=False))
    (work / "evaluate.yaml").write_text((HERE / "evaluate.yaml").read_text(encoding="utf-8"))
    return work, train


def _trained(work: Path, version: str, cfg: dict[str, Any]) -> bool:
    """Whether ``models/<version>`` already holds this config trained from this parent."""
    from compat.train.config import TrainConfig

    card_path = work / "models" / version / "card.json"
    if not card_path.is_file():
        return False
    card = json.loads(card_path.read_text(encoding="utf-8"))
    parent = cfg.get("parent")
    theirs = None
    if parent is not None:
        theirs = json.loads((work / "models" / parent / "card.json").read_text())["weights_sha256"]
    return (
        card.get("config") == TrainConfig(**cfg).model_dump(mode="json")
        and card.get("parent_weights_sha256") == theirs
    )


def run_count(epochs: int, params: dict[str, Any], chain: dict[str, list[str]]) -> dict[str, Any]:
    """Train and evaluate every chain at ``epochs`` per task; the numbers of :func:`render`."""
    work, train = prepare(epochs, params, chain)
    python = sys.executable
    out: dict[str, Any] = {}
    for method, versions in chain.items():
        started = time.perf_counter()
        for version in versions:
            if _trained(work, version, train[version]):
                continue
            cmd = [python, str(ROOT / "stages" / "train.py"), version, "--no-progress"]
            subprocess.run(cmd, cwd=work, check=True, stdout=subprocess.DEVNULL)
        cards = [json.loads((work / "models" / v / "card.json").read_text()) for v in versions]
        row: dict[str, Any] = {
            "train_seconds": round(sum(c["training_seconds"] for c in cards), 1),
            "steps": sum(c["steps"] for c in cards),
        }
        for gallery, suffix in GALLERIES.items():
            section = f"{method}{suffix}"
            cmd = [
                python, str(ROOT / "stages" / "evaluate.py"), "--params", "evaluate.yaml",
                "--section", section, "--manifest", "splits/validation.json",
                "--metrics", f"metrics/{section}", "--plots", f"plots/{section}",
                "--cache", f"cache/embeddings/{method}",
            ]  # fmt: skip
            subprocess.run(cmd, cwd=work, check=True, stdout=subprocess.DEVNULL)
            report = json.loads((work / "metrics" / section / "compat.json").read_text())
            top1 = report["sequence"]["identification"]["top1"]
            row[gallery] = {k: top1[k] for k in ("ac", "aa", "bc", "fc")}
        row["wall_seconds"] = round(time.perf_counter() - started, 1)
        out[method] = row
    return out


def render(results: dict[str, Any]) -> str:
    """results/epochs.md: one row per epoch count, each method's top-1 AC and AA per gallery."""
    methods = results["methods"]
    head = ["epochs per task"]
    for m in methods:
        head += [f"{m} AC template", f"{m} AA template", f"{m} AC instance", f"{m} train s"]
    lines = [
        "# Epochs per task, on the validation classes",
        "",
        "Generated by `experiments/sequence/epochs.py` from `results/epochs.json` (do not edit).",
        f"Command: `{results['command']}` at commit {results['commit']}"
        f"{' with uncommitted changes' if results.get('dirty') else ''}; "
        f"{results['machine']['cpu']}, {results['machine']['threads']} threads; "
        f"{results['minutes']:.1f} min in all.",
        "Top-1 identification on splits/validation.json (50 classes never trained on or "
        "evaluated): AC counts strictly compatible pairs, AA is in %; train s is the chain's "
        "seven tasks' training seconds (machine-dependent).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    for count, row in sorted(results["epochs"].items(), key=lambda kv: int(kv[0])):
        cells = [count]
        for m in methods:
            r = row[m]
            cells += [
                f"{r['template']['ac']:.2f}",
                f"{100 * r['template']['aa']:.1f}",
                f"{r['instance']['ac']:.2f}",
                f"{r['train_seconds']:.0f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, nargs="+", default=[3, 6, 10])
    p.add_argument("--methods", nargs="+", default=["hoc", "er"])
    p.add_argument("--render", action="store_true", help="only rewrite results/epochs.md")
    args = p.parse_args(argv)
    from compat.io import write_json, write_text

    if args.render:
        results = json.loads((RESULTS / "epochs.json").read_text(encoding="utf-8"))
        write_text(RESULTS / "epochs.md", render(results))
        return 0
    if any(e < 1 for e in args.epochs):
        p.error("--epochs: counts must be at least 1")
    from compat.evaluate.environment import machine_facts

    command = shlex.join(["python", "epochs.py", *(sys.argv[1:] if argv is None else argv)])
    start = time.perf_counter()
    params = yaml.safe_load((HERE / "params.yaml").read_text(encoding="utf-8"))
    chain = chains(params["train"], args.methods)
    measured = {}
    for count in args.epochs:
        measured[str(count)] = run_count(count, params, chain)
        print(f"epochs: {count} per task: {json.dumps(measured[str(count)])}", flush=True)
    results = {
        "command": command,
        "commit": _git("rev-parse", "--short", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "minutes": round((time.perf_counter() - start) / 60, 1),
        "methods": args.methods,
        "epochs": measured,
    }
    write_json(RESULTS / "epochs.json", results)
    write_text(RESULTS / "epochs.md", render(results))
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
