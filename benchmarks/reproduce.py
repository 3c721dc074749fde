"""Reproduce docs/reference.md's expected results 1-6 on the embedded data, on the CPU; write a table.

One project folder (``--workdir``) with its own, smaller embedded dataset (``--classes`` KanjiVG
characters, ``--eval-classes`` of them held out) is split two ways by the real ``split`` stage:

* extended-class (BCT Table 1): ``old`` = 30% of the training classes, ``new`` = all of them;
* open-class (UniBCT Table 1): ``old-oc`` = the same 30% (identical items: the script checks),
  ``open`` = the other 70%.

Then, with the default training configuration (small-cnn, dim 128, the docs/findings.md CPU schedule)
and a seed per version, it trains the old model and every new version against it:

====  ================================================================  =====================
 1    ``independent`` on new (also the paragon of results 1-4)          cross near chance, fails
 2    ``l2`` (BCT Eq. 3)                                                weak cross, usually fails
 3    ``bct`` basic: influence loss on old classes only (new-class      holds, gain > 0, self a
      samples dropped from the influence term, BCT Eq. 8)               few points below paragon
 4    ``bct`` sys (new-class old weights synthesized) and ``bct-kd``    higher gain than basic
 5    the default pipeline's v1 -> v2 -> v3 chain (metrics/compat.json) M(v3, v1) > M(v1, v1)
 6    ``unibct`` vanilla vs refined prototypes on open-class            refined > vanilla
====  ================================================================  =====================

The whole set (old model included) is trained ``--seeds`` times (default 3): on seed ``s`` (0, 1,
...) the k-th version of ``RUNS`` (old = 1, independent = 2, ..., unibct-refined = 9) trains with
seed ``k + 100 s``, so seed 0 is the single run of before. The data and the split are the same on
every seed. Each seed's cells are compared by the comparison engine (:func:`compat.compare.compare`:
a paired bootstrap over the held-out queries, seeded by ``s``): every claim of the form "A beats
B" is a paired difference with its one-sided lower bound, the update gain is BCT Eq. 9 against
the independent version trained on the same data. A result holds on a seed when its rule
(``RULES``) holds there, and holds only if it holds on every seed. Result 5 is read from the
default pipeline's metrics (run ``dvc repro`` first); it is reported as not measured if they are
missing.

Writes the raw per-seed numbers, the rows and the log of the run (command line, commit, machine,
wall time per seed) to ``--json`` and a markdown table to ``--markdown``; both are re-derived
from the JSON's per-seed numbers by :func:`summarize` and :func:`render` (scripts/readme_numbers.py
uses the same functions for the README, tests/test_reproduce_summary.py checks the committed
files agree).

Every version starts from scratch by default (``--init scratch``), as in the papers; ``--init
auto`` runs compat's default instead, where bct and bct-kd fine-tune the old model. bct always
runs as published (``l2: 0``: the influence loss alone, without compat's default alignment term,
which ``experiments/hard`` measures).

Usage: ``python benchmarks/reproduce.py [--seeds 3] [--workdir .repro] [--init scratch|auto]``
Takes about 9 minutes per seed on an idle 2-core CPU with the defaults (27 for three seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
FORMAT = 2  # the JSON's shape: 2 = per-seed "runs"; the single-run file of before had none

# name -> (training split, TrainConfig overrides). "old" first: every other version is its child.
RUNS: dict[str, tuple[str, dict[str, Any]]] = {
    "old": ("old", {}),
    "independent": ("new", {"parent": "old"}),
    "l2": ("new", {"method": "l2", "parent": "old"}),
    "bct-basic": (
        "new",
        {"method": "bct", "method_params": {"new_classes": "drop", "l2": 0.0}, "parent": "old"},
    ),
    "bct-sys": (
        "new",
        {
            "method": "bct",
            "method_params": {"new_classes": "synthesize", "l2": 0.0},
            "parent": "old",
        },
    ),
    "bct-kd": ("new", {"method": "bct-kd", "parent": "old"}),
    "independent-oc": ("open", {"parent": "old"}),
    "unibct-vanilla": (
        "open",
        {"method": "unibct", "method_params": {"prototypes": "vanilla"}, "parent": "old"},
    ),
    "unibct-refined": (
        "open",
        {"method": "unibct", "method_params": {"prototypes": "refined"}, "parent": "old"},
    ),
}
PARAGON = {name: "independent" for name in ("l2", "bct-basic", "bct-sys", "bct-kd")} | {
    "unibct-vanilla": "independent-oc",
    "unibct-refined": "independent-oc",
}
SEED_STRIDE = 100
# No space inside the formula: the README wraps this text, and a line must not start with "+ ".
SEED_RULE = f"seed s trains the k-th version (old = 1, ..., unibct-refined = 9) with seed `k+{SEED_STRIDE}*s`"
METRICS = ("top1", "mAP")
# The paired differences kept per seed ("A - B" of cells "query/gallery"), besides every
# version's "v/old - old/old" (BCT Eq. 2's criterion).
EXTRA_DIFFERENCES = (
    "bct-basic/old - l2/old",
    "bct-sys/old - bct-basic/old",
    "bct-kd/old - bct-basic/old",
    "unibct-refined/old - unibct-vanilla/old",
    "independent/independent - bct-basic/bct-basic",
)
NEAR_CHANCE = 5  # result 1: "near chance" = cross top-1 below this many times chance
GAIN_ABOVE = 10  # result 3: "well above 0" = top-1 gain above this many percent
PARAGON_GAP = (0, 10)  # result 3: "a few points below the paragon" = paragon - self in points
# What each result must show on one seed; a result holds only if it holds on every seed.
# "lower bound" is the comparison engine's one-sided lower bound of the paired difference.
RULES = {
    "1": f"M(independent, old) top-1 below {NEAR_CHANCE}x chance, and the criterion fails (the "
    "lower bound of M(new, old) - M(old, old) is not above 0 on top-1 and mAP both)",
    "2": "l2's cross test weaker than bct basic's: lower bound of M(bct-basic, old) - M(l2, old), "
    "top-1, above 0",
    "3": "criterion holds (lower bound of M(bct-basic, old) - M(old, old) above 0, top-1 and mAP), "
    f"top-1 gain above {GAIN_ABOVE}%, and paragon - self test (M(independent, independent) - "
    f"M(bct-basic, bct-basic), top-1) between {PARAGON_GAP[0]} and {PARAGON_GAP[1]} points",
    "4": "for each of bct-sys and bct-kd: criterion holds (lower bound above 0, top-1 and mAP) and "
    "its gain is higher than basic's: lower bound of M(x, old) - M(bct-basic, old), top-1, above 0 "
    "(both gains share M(old, old) and the paragon, so this is the paired test of the gain "
    "difference); held if both hold on every seed, partly if one does",
    "5": "M(v3, v1) > M(v1, v1) on top-1 and mAP (the default chain's committed run: one seed)",
    "6": "lower bound of M(unibct-refined, old) - M(unibct-vanilla, old) above 0, top-1 and mAP",
}


def project_params(classes: int, eval_classes: int, images_per_class: int) -> dict[str, Any]:
    return {
        "data": {"kind": "embedded", "classes": classes, "images_per_class": images_per_class},
        "split": {
            "eval": {"classes": eval_classes},
            "scenarios": [
                {"kind": "extended-class", "old_fraction": 0.3, "old": "old", "new": "new"},
                {"kind": "open-class", "old_fraction": 0.3, "old": "old-oc", "new": "open"},
            ],
        },
    }


def version_seeds(seed: int) -> dict[str, int]:
    """The training seed of every version on run ``seed`` (``SEED_RULE``)."""
    return {name: k + SEED_STRIDE * seed for k, name in enumerate(RUNS, start=1)}


def run_stage(workdir: Path, stage: str) -> None:
    r = subprocess.run(
        [sys.executable, str(REPO / "stages" / f"{stage}.py")],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"stage {stage} failed:\n{r.stderr[-3000:]}")
    print(r.stdout.strip(), flush=True)


def cell(manifest, codes, q: np.ndarray, g: np.ndarray):
    """The identification result of one matrix cell M(q, g) on the evaluation manifest."""
    from compat.evaluate.manifest import evaluate_manifest
    from compat.evaluate.protocols import create_protocols

    res = evaluate_manifest(manifest, q, g, create_protocols(["identification"]), codes=codes)
    return res["identification"]


def differences() -> list[str]:
    """Every paired difference kept per seed: each version's criterion, then the extras."""
    return [f"{name}/old - old/old" for name in RUNS if name != "old"] + list(EXTRA_DIFFERENCES)


def _percent(x: Any) -> Any:
    """A fraction (or a list of them, or None) in percent."""
    if x is None:
        return None
    if isinstance(x, list):
        return [_percent(v) for v in x]
    return 100 * x


def measure(results: dict[tuple[str, str], Any], seed: int, resamples: int) -> dict[str, Any]:
    """One seed's cells, paired differences and gains in percent, all from the comparison
    engine (paired bootstrap of ``resamples`` draws over the queries, stream (seed,
    "identification"))."""
    from compat.compare.engine import compare

    comparison = compare(results, resamples=resamples, seed=seed, stream="identification")
    key = {f"{q}/{g}": (q, g) for q, g in comparison}
    cells = {name: {m: 100 * float(comparison.value(k, m)) for m in METRICS} for name, k in key.items()}  # fmt: skip
    diffs = {}
    for d in differences():
        a, b = d.split(" - ")
        diffs[d] = {
            m: {k: _percent(v) for k, v in comparison.difference(key[a], key[b], m).to_json().items()}
            for m in METRICS
        }  # fmt: skip
    gains = {}
    for name, paragon in PARAGON.items():
        gains[name] = {}
        for m in METRICS:
            g = comparison.gain((name, "old"), ("old", "old"), (paragon, paragon), m).to_json()
            gains[name][m] = {**g, "value": _percent(g["value"]), "interval": _percent(g.get("interval"))}  # fmt: skip
    return {
        "confidence": comparison.confidence,
        "cells": cells,
        "differences": diffs,
        "gains": gains,
    }


def _reusable(card_path: Path, config: dict[str, Any], parent_sha: str | None) -> bool:
    """Whether a finished version was trained with exactly this configuration and parent."""
    if not card_path.is_file():
        return False
    card = json.loads(card_path.read_text())
    return card.get("config") == config and card.get("parent_weights_sha256") == parent_sha


def train_seed(seed: int, args, source, manifests, ev, images, codes) -> dict[str, Any]:
    """Train every version of ``RUNS`` for one seed (under models/seed-S, resumable), evaluate
    the cells, and compare them; the seed's raw numbers."""
    from compat.embeddings.embed import embed_images
    from compat.models.version import load_version
    from compat.train import TrainConfig, train_version

    start = time.perf_counter()
    seeds = version_seeds(seed)
    models = Path("models") / f"seed-{seed}"
    seconds: dict[str, float] = {}
    emb: dict[str, np.ndarray] = {}
    reused: list[str] = []
    epochs = None
    for name, (split, overrides) in RUNS.items():
        cfg_kw = {"seed": seeds[name], "init": args.init, **overrides}
        if args.epochs:
            cfg_kw["epochs"] = args.epochs
        if args.threads:
            cfg_kw["threads"] = args.threads
        cfg = TrainConfig(**cfg_kw)
        epochs = cfg.epochs
        t = time.perf_counter()
        card_path = models / name / "card.json"
        parent_sha = None
        if cfg.parent:
            parent_card = json.loads((models / cfg.parent / "card.json").read_text())
            parent_sha = parent_card["weights_sha256"]
        if _reusable(card_path, cfg.model_dump(mode="json"), parent_sha):
            reused.append(name)
        else:
            shutil.rmtree(card_path.parent, ignore_errors=True)  # another setting: train again
            train_version(
                name,
                cfg,
                source=source,
                manifest=manifests[split],
                models_dir=models,
                checkpoint_dir=Path(".ckpt") / f"seed-{seed}" / name,
                progress=False,
                quiet=True,
            )
        seconds[name] = time.perf_counter() - t
        model, _ = load_version(models / name)
        emb[name] = embed_images(model, images, batch_size=512)
        kept = " (kept from an earlier run)" if reused[-1:] == [name] else ""
        print(f"seed {seed}: {name} (seed {seeds[name]}): {seconds[name]:.0f} s{kept}", flush=True)

    t = time.perf_counter()
    results = {("old", "old"): cell(ev, codes, emb["old"], emb["old"])}
    for name in RUNS:
        if name != "old":
            results[(name, "old")] = cell(ev, codes, emb[name], emb["old"])
            results[(name, name)] = cell(ev, codes, emb[name], emb[name])
    run = {"seed": seed, "version_seeds": seeds, "epochs": epochs, "reused": reused}
    run |= measure(results, seed, args.resamples)
    seconds["evaluate+compare"] = time.perf_counter() - t
    seconds["total"] = time.perf_counter() - start
    run["seconds"] = seconds
    return run


def _git(*cmd: str) -> str | None:
    r = subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", type=Path, default=REPO / ".repro")
    p.add_argument("--classes", type=int, default=700)
    p.add_argument("--eval-classes", type=int, default=300)
    p.add_argument("--images-per-class", type=int, default=20)
    p.add_argument("--seeds", type=int, default=3, help=f"runs of the whole set ({SEED_RULE})")
    p.add_argument("--epochs", type=int, default=None, help="default: TrainConfig's")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--resamples", type=int, default=1000, help="paired bootstrap draws per seed")
    p.add_argument(
        "--init",
        choices=["scratch", "auto"],
        default="scratch",
        help="where every version starts: scratch (the papers' setting, default) or auto "
        "(compat's default: bct and bct-kd fine-tune the old model)",
    )
    p.add_argument("--chain-metrics", type=Path, default=REPO / "metrics" / "compat.json")
    p.add_argument("--markdown", type=Path, default=REPO / "benchmarks/results/reproduction.md")
    p.add_argument("--json", type=Path, default=REPO / "benchmarks/results/reproduction.json")
    args = p.parse_args()
    if args.seeds < 1:
        p.error("--seeds must be at least 1")
    if args.resamples < 1:
        p.error("--resamples must be at least 1: the rules read the paired lower bounds")
    command = shlex.join(["python", "benchmarks/reproduce.py", *sys.argv[1:]])
    started = datetime.now(UTC).isoformat(timespec="seconds")
    start = time.perf_counter()

    import torch

    from compat.data.sources import open_source
    from compat.data.split import load_eval_manifest, load_train_manifest
    from compat.evaluate.environment import machine_facts
    from compat.evaluate.manifest import label_codes
    from compat.io import write_text

    if args.threads:
        torch.set_num_threads(args.threads)
    commit = _git("rev-parse", "--short", "HEAD")
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    params = project_params(args.classes, args.eval_classes, args.images_per_class)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    t0 = time.perf_counter()
    run_stage(work, "data")
    run_stage(work, "split")
    seconds: dict[str, float] = {"data+split": time.perf_counter() - t0}

    os.chdir(work)
    source = open_source("data/source.json")
    manifests = {
        n: load_train_manifest(f"splits/{n}.json") for n in ("old", "old-oc", "new", "open")
    }
    if manifests["old"].items != manifests["old-oc"].items:
        raise SystemExit(
            "the extended-class and open-class old sets differ; cannot share one old model"
        )
    ev = load_eval_manifest("splits/eval.json")
    images = source.load(ev.items)
    codes = label_codes(ev.labels)
    chance = 100 / len(set(np.asarray(ev.labels)[ev.gallery]))

    runs = []
    for seed in range(args.seeds):
        runs.append(train_seed(seed, args, source, manifests, ev, images, codes))
        seconds[f"seed {seed}"] = runs[-1]["seconds"]["total"]

    chain = None
    if args.chain_metrics.is_file():
        report = json.loads(args.chain_metrics.read_text())
        chain = {m: report["matrix"]["identification"][m] for m in METRICS}

    seconds["total"] = time.perf_counter() - start
    doc = {
        "format": FORMAT,
        "setting": {
            "classes": args.classes,
            "eval_classes": args.eval_classes,
            "images_per_class": args.images_per_class,
            "old_fraction": params["split"]["scenarios"][0]["old_fraction"],
            "init": args.init,
            "epochs": runs[0]["epochs"],
            "seeds": [r["seed"] for r in runs],
            "seed_rule": SEED_RULE,
            "resamples": args.resamples,
            "confidence": runs[0]["confidence"],
            "units": "percent (cells, differences, intervals, lower bounds, gains)",
        },
        "chance": chance,
        "params": params,
        "runs": runs,
        "chain": chain,
        "log": {
            "command": command,
            "commit": commit,
            "uncommitted_changes": dirty,
            "started": started,
            "machine": machine_facts() | {"cpu_count": os.cpu_count()},
            "seconds": seconds,
        },
    }
    doc["rows"] = summarize(doc)
    md = render(doc)
    for path, text in ((args.markdown, md), (args.json, json.dumps(doc, indent=2, sort_keys=True))):
        write_text(path if path.is_absolute() else REPO / path, text + "\n")  # atomic
    print(md)
    return 0


# --- from the per-seed numbers to rows and tables (no torch; scripts/readme_numbers.py uses these)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def spread(values: list[float], digits: int = 1) -> str:
    """``mean [min, max]`` over seeds (the brackets even when the seeds agree); one seed: the
    value."""
    f = f"{{:.{digits}f}}"
    text = [f.format(v) for v in (_mean(values), min(values), max(values))]
    if len(values) == 1:
        return text[0]
    return f"{text[0]} [{text[1]}, {text[2]}]"


def span(values: list[float | None], digits: int = 1) -> str:
    """Signed ``min to max`` over seeds (one value when they agree at this precision)."""
    known = [v for v in values if v is not None]
    if not known:
        return "n/a"
    lo, hi = (f"{v:+.{digits}f}" for v in (min(known), max(known)))
    return lo if lo == hi else f"{lo} to {hi}"


def count(flags: list[bool]) -> str:
    return f"{sum(flags)}/{len(flags)}"


def verdict(flags: list[bool]) -> str:
    """Held only if held on every seed; says on how many."""
    n = len(flags)
    seeds = f"{n} seed{'s' * (n != 1)}"
    return f"held ({seeds})" if all(flags) else f"did not hold (held on {sum(flags)}/{seeds})"


def _lb_above_zero(run: dict[str, Any], diff: str, metrics: tuple[str, ...] = METRICS) -> bool:
    return all((run["differences"][diff][m].get("lower_bound") or 0) > 0 for m in metrics)


def summarize(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of results 1-6 from the per-seed numbers (``doc["runs"]``) and the default chain
    (``doc["chain"]``): what was measured over the seeds, and each rule's outcome per seed."""
    runs, chance = doc["runs"], doc["chance"]

    def vals(name: str, metric: str = "top1") -> list[float]:
        return [r["cells"][name][metric] for r in runs]

    def pair(name: str) -> str:
        return f"{spread(vals(name))} / {spread(vals(name, 'mAP'))}"

    def d(diff: str, field: str = "value", metric: str = "top1") -> list[float | None]:
        return [r["differences"][diff][metric].get(field) for r in runs]

    def gain(name: str) -> list[float | None]:
        return [r["gains"][name]["top1"]["value"] for r in runs]

    def gain_text(name: str) -> str:
        g = gain(name)
        return "n/a" if None in g else f"{spread(g, 0)}%"  # type: ignore[arg-type]

    def row(n: str, result: str, expected: str, measured: str, per_seed: list[bool], **extra):
        return {
            "result": f"{n} {result}",
            "expected": expected,
            "measured": measured,
            "per_seed": per_seed,
            "held": all(per_seed),
            "verdict": verdict(per_seed),
            "rule": RULES[n],
            **extra,
        }

    rows = []
    crit = "old/old"
    near = [r["cells"]["independent/old"]["top1"] < NEAR_CHANCE * chance for r in runs]
    fails = [not _lb_above_zero(r, f"independent/old - {crit}") for r in runs]
    rows.append(
        row(
            "1",
            "independent",
            "cross near chance; criterion fails",
            f"cross {pair('independent/old')} (chance {chance:.1f}: top-1 below {NEAR_CHANCE}x "
            f"on {count(near)} seeds); old/old {spread(vals('old/old'))}; criterion fails on "
            f"{count(fails)} seeds (lower bound of M(new, old) - M(old, old), top-1 "
            f"{span(d(f'independent/old - {crit}', 'lower_bound'))})",
            [a and b for a, b in zip(near, fails, strict=True)],
        )
    )
    passes = [_lb_above_zero(r, f"l2/old - {crit}") for r in runs]
    weaker = "bct-basic/old - l2/old"
    rows.append(
        row(
            "2",
            "l2",
            "weak cross test, usually fails",
            f"cross {pair('l2/old')}; criterion passes on {count(passes)} seeds; gain "
            f"{gain_text('l2')}; M(bct-basic, old) - M(l2, old) top-1 {span(d(weaker))} "
            f"(lower bound {span(d(weaker, 'lower_bound'))})",
            [_lb_above_zero(r, weaker, ("top1",)) for r in runs],
        )
    )
    basic = f"bct-basic/old - {crit}"
    holds = [_lb_above_zero(r, basic) for r in runs]
    big = [(g or 0) > GAIN_ABOVE for g in gain("bct-basic")]
    gap_key = "independent/independent - bct-basic/bct-basic"
    gap = [PARAGON_GAP[0] <= (v or 0) <= PARAGON_GAP[1] for v in d(gap_key)]
    rows.append(
        row(
            "3",
            "bct (basic)",
            "criterion holds; gain well above 0; self a few points below paragon",
            f"cross {pair('bct-basic/old')}; criterion holds on {count(holds)} seeds (lower bound "
            f"of M(new, old) - M(old, old) top-1 {span(d(basic, 'lower_bound'))}, mAP "
            f"{span(d(basic, 'lower_bound', 'mAP'))}); gain {gain_text('bct-basic')}; self "
            f"{spread(vals('bct-basic/bct-basic'))} vs paragon "
            f"{spread(vals('independent/independent'))} (paragon - self {span(d(gap_key))})",
            [a and b and c for a, b, c in zip(holds, big, gap, strict=True)],
        )
    )
    parts, per_variant = [], {}
    for name, short in (("bct-sys", "sys"), ("bct-kd", "kd")):
        higher = f"{name}/old - bct-basic/old"
        per_variant[short] = [
            _lb_above_zero(r, f"{name}/old - {crit}") and _lb_above_zero(r, higher, ("top1",))
            for r in runs
        ]
        minus = [
            None if a is None or b is None else a - b
            for a, b in zip(gain(name), gain("bct-basic"), strict=True)
        ]
        parts.append(
            f"{short} cross {pair(f'{name}/old')}, gain {gain_text(name)}, {span(minus, 0)} "
            f"points over basic's (M({name}, old) - M(bct-basic, old) top-1 lower bound "
            f"{span(d(higher, 'lower_bound'))}; criterion lower bound top-1 "
            f"{span(d(f'{name}/old - {crit}', 'lower_bound'))}), held on "
            f"{count(per_variant[short])} seeds"
        )
    both = [all(f) for f in zip(*per_variant.values(), strict=True)]
    r4 = row(
        "4",
        "bct sys / kd",
        "criterion holds with higher gain than basic bct",
        "; ".join(parts) + f"; basic gain {gain_text('bct-basic')}",
        both,
    )
    whole = [k for k, f in per_variant.items() if all(f)]
    if len(whole) == 1:
        r4["partly"] = True
        r4["verdict"] = "partly (" + ", ".join(
            f"{k} held on {count(f)} seeds" for k, f in per_variant.items()
        ) + ")"  # fmt: skip
    rows.append(r4)
    rows.append(chain_row(doc.get("chain")))
    ref = "unibct-refined/old - unibct-vanilla/old"
    rows.append(
        row(
            "6",
            "unibct open-class",
            "refined prototypes beat vanilla",
            f"refined cross {pair('unibct-refined/old')} vs vanilla {pair('unibct-vanilla/old')}; "
            f"refined - vanilla top-1 {span(d(ref))} (lower bound {span(d(ref, 'lower_bound'))}), "
            f"mAP {span(d(ref, metric='mAP'))} (lower bound "
            f"{span(d(ref, 'lower_bound', 'mAP'))}); above 0 on {count([(v or 0) > 0 for v in d(ref)])} "
            "seeds",
            [_lb_above_zero(r, ref) for r in runs],
        )
    )
    return rows


def chain_row(chain: dict[str, Any] | None) -> dict[str, Any]:
    """Result 5 from the default chain's committed metrics (one run, point values)."""
    row = {"result": "5 chain v1 -> v2 -> v3", "rule": RULES["5"]}
    if chain is None:
        return row | {
            "expected": "M(v3, v1) > M(v1, v1)",
            "measured": "not measured: run `dvc repro` first",
            "held": None,
            "verdict": "not measured",
        }
    t, m = chain["top1"], chain["mAP"]
    held = t["v3"]["v1"] > t["v1"]["v1"] and m["v3"]["v1"] > m["v1"]["v1"]
    return row | {
        "expected": "v3 compatible with v1 (never trained against it)",
        "measured": f"M(v3,v1) {100 * t['v3']['v1']:.1f} / {100 * m['v3']['v1']:.1f} vs M(v1,v1) {100 * t['v1']['v1']:.1f} / {100 * m['v1']['v1']:.1f} (the default chain, one run)",
        "held": held,
        "verdict": "held" if held else "did not hold",
    }


def setting_text(doc: dict[str, Any]) -> str:
    """The setting the rows were produced under, and the run's log, in one paragraph."""
    s, log = doc["setting"], doc["log"]
    m = log["machine"]
    seeds = ", ".join(map(str, s["seeds"]))
    commit = (log["commit"] or "an unknown commit") + (
        " with uncommitted changes" if log["uncommitted_changes"] else ""
    )
    per_seed = ", ".join(f"{r['seconds']['total'] / 60:.1f}" for r in doc["runs"]) + " min"
    reused = sum(len(r.get("reused", [])) for r in doc["runs"])
    if reused:
        per_seed += (
            f" ({reused} of the {len(RUNS) * len(doc['runs'])} versions were kept from an earlier "
            "run in the same workdir: their training is not in these times)"
        )
    return (
        f"{s['classes']} classes x {s['images_per_class']} images, {s['eval_classes']} held out "
        f"(chance top-1 {doc['chance']:.2f}%); old = {100 * s['old_fraction']:.0f}% of the "
        f"training classes; every version starts with init: {s['init']} and trains "
        f"{s['epochs']} epochs; seeds {seeds} ({s['seed_rule']}; the data and split are the same "
        f'on every seed). Each cell is the mean [min, max] over the seeds; a range "a to b" is '
        f"the lowest and highest per-seed value; a lower bound is the one-sided "
        f"{100 * s['confidence']:.0f}% bound of the paired bootstrap difference over the held-out "
        f"queries ({s['resamples']} resamples per seed, compat.compare). A result held only if "
        f"its rule held on every seed. Produced by `{log['command']}` at {commit} on "
        f"{m.get('cpu') or m.get('arch')} ({m.get('cpu_count')} cores, torch {m.get('torch')}, "
        f"{m.get('threads')} threads), started {log['started']}: {log['seconds']['total'] / 60:.1f} "
        f"min in all, per seed {per_seed}."
    )


def render(doc: dict[str, Any]) -> str:
    """reproduction.md: the rows, every version's cells, the per-seed paired differences, the
    rules and the setting, all from the JSON's per-seed numbers."""
    runs, rows = doc["runs"], summarize(doc)
    n = len(runs)
    lines = [
        "| expected result (docs/reference.md) | expected | measured (top-1 / mAP %, cross = "
        f"M(new, old); mean [min, max] over {n} seed{'s' * (n != 1)}) | |",
        "|---|---|---|---|",
        *(f"| {r['result']} | {r['expected']} | {r['measured']} | {r['verdict']} |" for r in rows),
        "",
        "| version | training seeds | M(v, old) top-1 | M(v, old) mAP | M(v, v) top-1 | M(v, v) mAP |",
        "|---|---|---|---|---|---|",
    ]
    for name in RUNS:
        vs = ", ".join(str(r["version_seeds"][name]) for r in runs)
        out = [spread([r["cells"][f"{name}/old"][m] for r in runs]) for m in METRICS]
        own = ["", ""]
        if name != "old":
            own = [spread([r["cells"][f"{name}/{name}"][m] for r in runs]) for m in METRICS]
        lines.append(f"| {name} | {vs} | " + " | ".join(out + own) + " |")
    head = " | ".join(f"seed {r['seed']}" for r in runs)
    lines += [
        "",
        "Paired differences per seed (percentage points: value [95% interval], one-sided lower "
        "bound; cells named query/gallery):",
        "",
        f"| difference | metric | {head} |",
        "|---|---|" + "---|" * n,
    ]
    for diff in differences():
        for m in METRICS:
            per = []
            for r in runs:
                x = r["differences"][diff][m]
                lo, hi = x.get("interval") or (None, None)
                iv = "" if lo is None or hi is None else f" [{lo:+.1f}, {hi:+.1f}]"
                lb = x.get("lower_bound")
                per.append(f"{x['value']:+.1f}{iv}" + ("" if lb is None else f", {lb:+.1f}"))
            lines.append(f"| {diff} | {m} | " + " | ".join(per) + " |")
    lines += ["", "Rules (per seed; a result held only if its rule held on every seed):", ""]
    lines += [f"{k}. {rule}" for k, rule in RULES.items()]
    lines += ["", setting_text(doc)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
