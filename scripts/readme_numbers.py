#!/usr/bin/env python3
"""Every number in the documents, generated from the committed metrics.

    python scripts/readme_numbers.py           # rewrite the marked blocks of every document
    python scripts/readme_numbers.py --check   # exit 1, naming each document and block that differs
    python scripts/readme_numbers.py --snapshot COMMIT
        # keep COMMIT's default-chain metrics (from git) as metrics/runs/COMMIT.json: the
        # committed record of a run on another machine, for the spread across machines

The documents are README.md, docs/*.md and experiments/*/README.md. A block is the text
between ``<!-- numbers: NAME -->`` and ``<!-- /numbers -->``, an inline value the text between
``<!-- value: NAME -->`` and ``<!-- /value -->`` on one line; NAME picks the generator below
(one generator may fill blocks in several documents), and each generator reads only committed files (``metrics/``,
``metrics/runs/``, ``experiments/*/metrics``, ``experiments/bict/results``,
``benchmarks/results``, ``contracts/``, the params files, ``docs/first-session.txt``) or runs a
command on them (``dvc metrics show``, ``compat contract validate``). The recorded session
(scripts/first_session.py) is checked number by number against ``metrics/compat.json``. What depends on the machine (psi kept or refused, exact values) is
worded as the committed run's outcome, beside the spread seen on the other runs kept under
``metrics/runs/``. tests/test_readme_numbers.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- numbers: ([\w-]+) -->\n)(.*?)(<!-- /numbers -->)", re.S)
# A number inside a sentence or a table cell: <!-- value: NAME -->1,100 x 300<!-- /value -->
INLINE = re.compile(r"(<!-- value: ([\w-]+) -->)([^\n]*?)(<!-- /value -->)")


def _json(rel: str) -> Any:
    return json.loads((ROOT / rel).read_text(encoding="utf-8"))


def pct(x: float | None, digits: int = 1) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}"


def pair(top1: float | None, m_ap: float | None) -> str:
    """``top-1 / mAP`` in percent, one decimal."""
    return f"{pct(top1)} / {pct(m_ap)}"


def _cell(matrix: dict[str, Any], metric: str, q: str, g: str) -> float | None:
    return matrix.get(metric, {}).get(q, {}).get(g)


# --- the default chain (metrics/compat.json) ------------------------------------------------


def default_chain() -> str:
    """The identification matrix of the default chain, top-1 / mAP %."""
    d = _json("metrics/compat.json")
    chain, m = d["chain"], d["matrix"]["identification"]
    lines = ["| | " + " | ".join(chain) + " |", "|---|" + "---|" * len(chain)]
    for i, q in enumerate(chain):
        cells = [
            pair(_cell(m, "top1", q, g), _cell(m, "mAP", q, g)) if j <= i else ""
            for j, g in enumerate(chain)
        ]
        lines.append(f"| {q} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _gain_text(g: dict[str, Any]) -> str:
    lo, hi = g.get("interval") or (None, None)
    text = f"{pct(g['value'], 0)}%"
    if lo is not None and hi is not None:
        text += f" [{pct(lo, 0)}, {pct(hi, 0)}]"
    if not g.get("meaningful"):
        reason = str(g.get("reason")).replace("*", "\\*")  # new*: not Markdown emphasis
        text += f" (not meaningful: {reason})"
    return text


def _train(params_rel: str) -> dict[str, Any]:
    """The ``train`` section of a pipeline's params."""
    import yaml

    return yaml.safe_load((ROOT / params_rel).read_text("utf-8"))["train"]


def _fine_tunes(version: str, params_rel: str = "params.yaml") -> str | None:
    """The version ``version`` starts from (its parent, when its params make it fine-tune), or
    None: ``init: parent``, or ``init: auto`` for the methods that fine-tune by default."""
    cfg = _train(params_rel).get(version) or {}
    init, parent = cfg.get("init", "auto"), cfg.get("parent")
    if parent and (init == "parent" or (init == "auto" and cfg.get("method") in ("bct", "bct-kd"))):
        return parent
    return None


def _gains(d: dict[str, Any]) -> str:
    gains = d["gain"]["identification"]["top1"]
    return "; ".join(f"{new} over {old} {_gain_text(g)}" for new, per in gains.items() for old, g in per.items())  # fmt: skip


def _above(d: dict[str, Any]) -> list[str]:
    gains = d["gain"]["identification"]["top1"]
    return [
        f"{new} over {old}" for new, per in gains.items() for old, g in per.items()
        if g.get("value") is not None and g["value"] > 1
    ]  # fmt: skip


# The default pipeline's paragons are the papers' (from scratch); the fine-tuned ones are trained
# by experiments/paragons (issue 40 moved them out of the default run). Each text names the kind
# from the pipeline's own params, so swapping them back would still read true.
OTHER_PARAGONS = "experiments/paragons"

PARAGON_KINDS = {
    "fine-tuned": "each version trained the way it is, minus the compatibility terms, from the same start",
    "papers'": "each version's training split with no compatibility term, trained from scratch with its own seed",
}  # fmt: skip


def _paragon_kind(paragons: dict[str, str], params_rel: str = "params.yaml") -> str:
    """``fine-tuned`` when every paragon starts from a parent (its params fine-tune it), else
    ``papers'`` when none does; a pipeline mixing the two is an error, not a sentence."""
    train = _train(params_rel)
    missing = [p for p in paragons.values() if p not in train]
    if not paragons or missing:
        raise SystemExit(f"error: {params_rel}: evaluate.paragon: {missing or 'none'} not in train")
    tuned = [_fine_tunes(p, params_rel) is not None for p in paragons.values()]
    if tuned and all(tuned):
        return "fine-tuned"
    if not any(tuned):
        return "papers'"
    raise SystemExit(
        f"error: {params_rel}: evaluate.paragon mixes fine-tuned and from-scratch paragons"
    )


def _other_gains() -> str:
    """The update gains against the other kind of paragon, on experiments/paragons' own run of
    the default chain."""
    a = _json(f"{OTHER_PARAGONS}/metrics/compat.json")
    m = a["matrix"]["identification"]
    first = a["chain"][0]
    kind = _paragon_kind(a["paragon"], f"{OTHER_PARAGONS}/params.yaml")
    paragons = ", ".join(f"{p} {pair(_cell(m, 'top1', p, p), _cell(m, 'mAP', p, p))}" for p in a["paragon"].values())  # fmt: skip
    text = (
        f"Against the {kind} paragons ({PARAGON_KINDS[kind]}: {paragons}; `{OTHER_PARAGONS}/`, its "
        f"own run of the same chain, M({first}, {first}) "
        f"{pair(_cell(m, 'top1', first, first), _cell(m, 'mAP', first, first))}): {_gains(a)}."
    )
    above = _above(a)
    if above:
        text += f" Above 100% there: {', '.join(above)}."
    return text


def default_chain_notes() -> str:
    """Paragons, the criterion, the update gains against both paragons and psi's outcome on the
    committed run."""
    d = _json("metrics/compat.json")
    chain, m = d["chain"], d["matrix"]["identification"]
    diff = d["difference"]["identification"]["top1"]
    paragons = d["paragon"]
    out = []
    para = ", ".join(
        f"{p} {pair(_cell(m, 'top1', p, p), _cell(m, 'mAP', p, p))}" for p in paragons.values()
    )
    kind = _paragon_kind(paragons)
    out.append(f"The {kind} paragons ({PARAGON_KINDS[kind]}): {para}.")
    crosses = [(q, g) for i, q in enumerate(chain) for g in chain[:i]]
    held = [(q, g) for q, g in crosses if (diff.get(q, {}).get(g) or {}).get("lower_bound", -1) > 0]
    if len(held) == len(crosses):
        last, first = chain[-1], chain[0]
        start = _fine_tunes(last)
        before = _fine_tunes(start) if start else None
        tail = (
            f" ({first} took no part in {last}'s training loss, but {last} starts from {start}'s "
            "weights" + (f", which started from {before}'s)" if before else ")")
            if start
            else f" ({first} took no part in {last}'s training)"
        )
        out.append(
            "Every cross test beats the old self test with 95% confidence (the lower bound of the "
            f"paired top-1 difference is above 0 for all {len(crosses)} pairs): "
            f"{last}, trained against {chain[-2]} only, serves {first}'s gallery{tail}."
        )
    else:
        failed = ", ".join(f"M({q}, {g})" for q, g in crosses if (q, g) not in held)
        out.append(f"The criterion does not hold with 95% confidence for {failed}.")
    paragraphs = [out]
    out = []
    paragraphs.append(out)
    out.append(
        f"Update gains (BCT Eq. 9, top-1, 95% bootstrap interval) against the {kind} paragons: "
        f"{_gains(d)}."
    )
    above = _above(d)
    if above:
        out.append(
            f"A gain above 100% ({', '.join(above)}) says the version beats its paragon's self "
            "test: that paragon is weaker than the version and bounds nothing."
        )
    else:
        out.append(f"None is above 100%: each {kind} paragon bounds its version.")
    if (ROOT / OTHER_PARAGONS / "metrics" / "compat.json").exists():
        out.append(_other_gains())
    out = []
    paragraphs.append(out)
    for new, fwd in d.get("forward", {}).items():
        out.append(_psi_text(new, fwd))
    env = d.get("environment")
    if env:
        out.append(f"Produced on: {_machine(env)}.")
    return "\n\n".join("\n".join(_wrap(" ".join(p))) for p in paragraphs if p)


def _psi_text(new: str, fwd: dict[str, Any]) -> str:
    """psi's outcome on the committed run: kept (with its held-out gain bound) or refused."""
    old = fwd["from"]
    met = fwd["metrics"]["identification"]
    t, a = met["top1"], met["mAP"]
    psi = fwd.get("psi") or {}
    forward = f"M({new}, psi({old})) {pair(t['forward'], a['forward'])}"
    backward = f"backward M({new}, {old}) {pair(t['backward'], a['backward'])}"
    bound = psi.get("held_out_lower_bound")
    held = "" if bound is None else f", held-out top-1 gain lower bound {100 * bound:+.2f} points"
    if "refused" not in psi:  # a report written before the outcome was recorded
        head = f"Forward {forward} against {backward}"
    elif psi["refused"]:
        head = (
            f"psi ({old} -> {new}) was refused on this run: {psi['refused']}. Forward therefore "
            f"equals backward: {forward}"
        )
    else:
        head = (
            f"psi ({old} -> {new}) was kept on this run{held}: forward {forward} against {backward}"
        )
    curve = ", ".join(pct(p["value"]) for p in t.get("curve", []))
    tail = f"; the partial-backfill curve (top-1, 0 to 100% upgraded): {curve}" if curve else ""
    return head + tail + "."


def _machine(env: dict[str, Any]) -> str:
    parts = [env.get("cpu") or "an unrecorded processor"]
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("threads"):
        parts.append(f"{env['threads']} threads")
    if env.get("native_bf16") is not None:  # recorded since issue 40
        parts.append("trained in bf16 (native)" if env["native_bf16"] else "trained in float32")
    return ", ".join(parts)


def default_chain_spread() -> str:
    """The committed run beside every run of another machine kept under metrics/runs/."""
    d = _json("metrics/compat.json")
    chain, m = d["chain"], d["matrix"]["identification"]
    runs = sorted((ROOT / "metrics" / "runs").glob("*.json"))
    if not runs:
        return "No run of another machine is kept under `metrics/runs/`."
    others = [json.loads(p.read_text(encoding="utf-8")) for p in runs]
    head = "| cell | committed run | " + " | ".join(f"{o['commit']} ({o['machine']})" for o in others) + " |"  # fmt: skip
    lines = [head, "|---|---|" + "---|" * len(others)]
    cells = [(q, g) for i, q in enumerate(chain) for g in chain[: i + 1]]
    for q, g in cells:
        row = [f"M({q}, {g})", pair(_cell(m, "top1", q, g), _cell(m, "mAP", q, g))]
        for o in others:
            om = o["identification"]
            row.append(pair(_cell(om, "top1", q, g), _cell(om, "mAP", q, g)))
        lines.append("| " + " | ".join(row) + " |")
    for new, fwd in d.get("forward", {}).items():
        t = fwd["metrics"]["identification"]["top1"]
        row = [f"forward M({new}, psi({fwd['from']})), top-1", _fwd(t["forward"], t["backward"])]
        for o in others:
            of = o.get("forward", {}).get(new)
            row.append("n/a" if of is None else _fwd(of["top1"], of["backward_top1"]))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _fwd(forward: float, backward: float) -> str:
    """Forward top-1 and what it says of psi: an identity (refused) psi gives backward exactly."""
    return f"{pct(forward)} ({'psi refused' if forward == backward else 'psi kept'})"


# --- experiments/hard ----------------------------------------------------------------------


HARD = "experiments/hard/metrics"


def _hard_verdict(d: dict[str, Any]) -> tuple[list[float], str]:
    diff = d["difference"]["identification"]
    bound = [diff[k]["v2"]["v1"]["lower_bound"] for k in ("top1", "mAP")]
    return bound, "holds" if min(bound) > 0 else "fails"


def hard() -> str:
    """The hard configuration's committed run: M(v1, v1), backward, forward, self, the gate's
    bound."""
    d = _json(f"{HARD}/compat.json")
    m = d["matrix"]["identification"]
    fwd = d["forward"]["v2"]["metrics"]["identification"]
    bound, verdict = _hard_verdict(d)
    psi = d["forward"]["v2"].get("psi") or {}
    kept = (
        "psi refused" if psi.get("refused") else ("psi kept" if "refused" in psi else "psi outcome not recorded")
    )  # fmt: skip
    return "\n".join(
        [
            "| | M(v1, v1) | backward M(v2, v1) | forward M(v2, psi(v1)) | self M(v2, v2) | gate lower bound, top-1 / mAP |",
            "|---|---|---|---|---|---|",
            f"| committed run (v2 fine-tunes v1, bct with its alignment term `l2: 3`; {kept}) | "
            f"{pair(_cell(m, 'top1', 'v1', 'v1'), _cell(m, 'mAP', 'v1', 'v1'))} | "
            f"{pair(_cell(m, 'top1', 'v2', 'v1'), _cell(m, 'mAP', 'v2', 'v1'))} | "
            f"{pair(fwd['top1']['forward'], fwd['mAP']['forward'])} | "
            f"{pair(_cell(m, 'top1', 'v2', 'v2'), _cell(m, 'mAP', 'v2', 'v2'))} | "
            f"{100 * bound[0]:+.1f} / {100 * bound[1]:+.1f}: {verdict} |",
        ]
    )  # fmt: skip


def hard_notes() -> str:
    """What the hard configuration's committed run says beside its table: verification, psi's
    settings and outcome, and the validation classes' run (experiments/hard/metrics/)."""
    import yaml

    from compat.maps.psi_config import UpgradeConfig

    d = _json(f"{HARD}/compat.json")
    out = []
    v = d["matrix"].get("verification", {}).get("tar@far=0.001")
    if v:
        better = "above" if v["v2"]["v1"] > v["v1"]["v1"] else "below"
        out.append(
            f"Verification (TAR at FAR 0.001, which the gate does not read): M(v2, v1) "
            f"{pct(v['v2']['v1'])} against M(v1, v1) {pct(v['v1']['v1'])}, {better} it; "
            f"M(v2, v2) {pct(v['v2']['v2'])}."
        )
    params = yaml.safe_load((ROOT / "experiments/hard/params.yaml").read_text("utf-8"))
    cfg = UpgradeConfig.model_validate(params["upgrade"]["v2"])
    psi = d["forward"]["v2"].get("psi") or {}
    if psi.get("refused"):
        outcome = f"; on this run it was refused: {psi['refused']}."
    else:
        outcome = "; on this run it was kept." if "refused" in psi else "."
    out.append(
        f"psi ({'residual, starting as the identity' if cfg.residual else 'a plain MLP'}) holds out "
        f"{100 * cfg.val_fraction:g}% of v2's training classes, keeps its best epoch on them "
        f"(patience {cfg.patience}) and is refused unless the {cfg.confidence:g} lower bound of "
        f"its held-out top-1 gain is above {cfg.min_gain:g}" + outcome
    )
    if (ROOT / HARD / "validation" / "compat.json").exists():
        val = _json(f"{HARD}/validation/compat.json")
        vm = val["matrix"]["identification"]
        bound, verdict = _hard_verdict(val)
        out.append(
            f"On the validation classes (the `validate` stage, where choices are made): M(v1, v1) "
            f"{pair(_cell(vm, 'top1', 'v1', 'v1'), _cell(vm, 'mAP', 'v1', 'v1'))}, M(v2, v1) "
            f"{pair(_cell(vm, 'top1', 'v2', 'v1'), _cell(vm, 'mAP', 'v2', 'v1'))}, lower bounds "
            f"{100 * bound[0]:+.1f} / {100 * bound[1]:+.1f}: the criterion {verdict} there."
        )
    return "\n".join(_wrap(" ".join(out)))


# --- query adapters (metrics/adapters.json, metrics/adapted.json) --------------------------


def _recovery(top1: dict[str, Any]) -> float | None:
    """An adapted entry's M(adapt(new), v1) over BCT's M(v, v1), top-1 (None: no BCT cell)."""
    return (top1.get("recovery") or {}).get("value")


def _share_text(share: float | None) -> str:
    return "n/a" if share is None else f"{share:.2f}"


def _served_by(fit: dict[str, Any]) -> str:
    """What serves the queries: ``procrustes query adapter`` or ``procrustes query blend, weight
    0.8`` (a blend's weight on the adapted query, selected on held-out classes)."""
    blend = fit.get("blend")
    if blend:
        return f"{fit['kind']} query blend, weight {blend['weight']:g}"
    return f"{fit['kind']} query adapter"


def _check_text(fit: dict[str, Any]) -> str:
    """The check that decided whether the map is kept: on the validation classes as the gate
    judges (served / M(v1, v1), lower bound), else on held-out training classes (with /
    baseline, lower bound)."""
    verdict = "refused" if fit["refused"] else "kept"
    v = fit.get("verdict")
    if v:
        return (
            f"{pct(v['served'])} / {pct(v['old_self'])}, {100 * v['lower_bound']:+.1f} on "
            f"validation: {verdict}"
        )
    h = fit["heldout"]
    return f"{pct(h['top1'])} / {pct(h['baseline'])}, {100 * h['lower_bound']:+.1f}: {verdict}"


def adapters() -> str:
    """Each query adapter of the default pipeline: its held-out check when fitted, and on the
    evaluation set M(adapt(new), v1) beside the native cell, v1's self test and BCT's M(v3, v1)."""
    fits = _json("metrics/adapters.json")
    cells = _json("metrics/adapted.json")
    rows = [
        "| map (served through) | its check: top-1 served / baseline, gain bound | M(served, v1) | "
        "M(new, v1) native | M(v1, v1) | BCT's M(v3, v1) | served - M(v1, v1), bound | "
        "recovery of M(v3, v1) | fit s | us/query |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, fit in fits.items():
        m = cells[name]["metrics"]["identification"]
        t, a = m["top1"], m["mAP"]
        diff = t["adapted_minus_old"]
        rows.append(
            f"| {name} ({_served_by(fit)}) | {_check_text(fit)} | "
            f"{pair(t['adapted'], a['adapted'])} | "
            f"{pair(t['native'], a['native'])} | {pair(t['old'], a['old'])} | "
            f"{pair(t.get('bct'), a.get('bct'))} | {100 * diff['value']:+.1f}, "
            f"{100 * diff['lower_bound']:+.1f} | "
            f"{_share_text(_recovery(t))} | "
            f"{fit['fit_seconds']:.1f} | {fit['apply_us_per_query']:.1f} |"
        )
    return "\n".join(rows)


def adapters_notes() -> str:
    """What the default pipeline's adapters table says: the new model's native cell against
    v1's self test, and which adapters were kept or refused, and how the refused ones did on
    the evaluation classes."""
    fits = _json("metrics/adapters.json")
    cells = _json("metrics/adapted.json")
    out = []
    first = next(iter(cells.values()))
    t = first["metrics"]["identification"]["top1"]
    new = first.get("new", "the new model")
    if t["native"] > t["old"]:
        out.append(
            f"`{new}` already searches v1's gallery better than v1 does without any map (native "
            f"{pct(t['native'])} against M(v1, v1) {pct(t['old'])} top-1): it is not unrelated to "
            "v1, and an adapter adds on top."
        )
    else:
        out.append(
            f"`{new}`'s raw queries do not beat v1's self test on its gallery (native "
            f"{pct(t['native'])} against {pct(t['old'])} top-1)."
        )
    g = t.get("bct_gain")
    if g and g.get("value") is not None and first.get("bct"):
        lo, hi = g.get("interval") or (None, None)
        out.append(
            f"BCT's update gain of {first['bct']} measured against `{new}` (trained from scratch "
            f"with no compatibility term: the papers' paragon) is {100 * g['value']:.1f}%"
            + (f" [{100 * lo:.1f}, {100 * hi:.1f}]" if lo is not None else "")
            + "."
        )
    kept = [n for n, f in fits.items() if not f["refused"]]
    refused = [n for n, f in fits.items() if f["refused"]]
    if kept:
        out.append(f"Kept when fitted: {', '.join(kept)}.")
    if refused:
        passing = [
            n for n in refused
            if cells[n]["metrics"]["identification"]["top1"]["adapted_minus_old"]["lower_bound"] > 0
        ]  # fmt: skip
        where = (
            "M(v1, v1) on the validation classes"
            if all(fits[n].get("verdict") for n in refused)
            else "its baseline on held-out training classes"
        )
        text = f"Refused when fitted (not above {where} with the gate's confidence): {', '.join(refused)}"
        if passing:
            text += (
                f"; {', '.join(passing)} would still pass BCT's criterion on the evaluation classes, "
                "but `serve: query-adapter` serves no refused map"
            )
        out.append(text + ".")
    return "\n".join(_wrap(" ".join(out)))


# --- a model trained elsewhere, from scratch (experiments/adapters) --------------------------

SCRATCH = "experiments/adapters/metrics"
GLYPHS = "experiments/glyphs/metrics"  # the same tables on printed characters (issue 42 item 2)


def _ival(e: dict[str, Any], term: str) -> str:
    lo, hi = (e.get("interval") or {}).get(term) or (None, None)
    return "" if lo is None else f" [{pct(lo)}, {pct(hi)}]"


def _psi_share(top1: dict[str, Any]) -> float | None:
    """M(new, psi(v1)) over BCT's M(v, v1), top-1, from an adapted entry (None without both)."""
    bct = top1.get("bct")
    return top1["forward"] / bct if "forward" in top1 and bct else None


def _scratch_models(metrics: str = SCRATCH) -> dict[str, list[str]]:
    """Each outside model of a pipeline (experiments/adapters by default) with its maps, in the
    order fitted."""
    out: dict[str, list[str]] = {}
    for name, entry in _json(f"{metrics}/adapted.json").items():
        out.setdefault(entry["new"], []).append(name)
    return out


def adapters_scratch(metrics: str = SCRATCH) -> str:
    """Models trained from scratch (no tie to v1) served against v1's gallery: raw, through each
    query adapter, through psi on the gallery; beside BCT's compatible version on that data
    (``metrics``: the pipeline's metrics folder)."""
    fits = _json(f"{metrics}/adapters.json")
    cells = _json(f"{metrics}/adapted.json")
    rows = [
        "| new model | served through | M(served, v1) top-1 [95% interval] | mAP | "
        "minus M(v1, v1), top-1 lower bound | share of BCT's M(v, v1) top-1 | "
        "its check when fitted (top-1 served / baseline, gain bound) | fit s | us/query |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for new, names in _scratch_models(metrics).items():
        # The cells every map of one model shares (raw, psi's forward): its first map's entry.
        first = cells[names[0]]["metrics"]["identification"]
        t0, a0 = first["top1"], first["mAP"]
        rows.append(
            f"| {new} | nothing (its raw queries) | {pct(t0['native'])}{_ival(t0, 'native')} | "
            f"{pct(a0['native'])} | | | | | |"
        )
        for name in names:
            fit = fits[name]
            m = cells[name]["metrics"]["identification"]
            t, a = m["top1"], m["mAP"]
            rows.append(
                f"| {new} | {_served_by(fit)} | {pct(t['adapted'])}"
                f"{_ival(t, 'adapted')} | {pct(a['adapted'])} | "
                f"{100 * t['adapted_minus_old']['lower_bound']:+.1f} | "
                f"{_share_text(_recovery(t))} | {_check_text(fit)} | {fit['fit_seconds']:.1f} | "
                f"{fit['apply_us_per_query']:.1f} |"
            )
        if "forward" in t0:
            refused = " (refused when fitted: the identity)" if _psi_fitted(metrics, new).get("refused") else ""  # fmt: skip
            rows.append(
                f"| {new} | psi on v1's gallery (no query map){refused} | {pct(t0['forward'])}"
                f"{_ival(t0, 'forward')} | {pct(a0['forward'])} | "
                f"{100 * t0['forward_minus_old']['lower_bound']:+.1f} | "
                f"{_share_text(_psi_share(t0))} | | | |"
            )
    return "\n".join(rows)


def _meets(share: float | None, bound: float | None, target: float) -> bool:
    """The scratch target: beat M(v1, v1) with the gate's lower bound and reach ``target`` of
    BCT's M(v, v1)."""
    return share is not None and share >= target and bound is not None and bound > 0


def _psi_verdict(top1: dict[str, Any], target: float) -> str:
    """psi on the gallery (no query map; the gallery's stored rows rewritten once) against the
    same target: its share, whether it reaches it and beats M(v1, v1) with its lower bound."""
    share = _psi_share(top1)
    bound = (top1.get("forward_minus_old") or {}).get("lower_bound")
    met = _meets(share, bound, target)
    return (
        f"; psi on the gallery {share:.2f}"
        + (f" (lower bound {100 * bound:+.1f} over M(v1, v1))" if bound is not None else "")
        + f": {'met' if met else 'not met'} (the stored rows rewritten once, no query map)."
    )


def _psi_fitted(metrics: str, new: str) -> dict[str, Any]:
    """What the upgrade stage decided of psi into ``new``'s space (metrics/compat.json's
    forward provenance): ``refused`` is its reason, or None when kept; {} without one."""
    return _decisions().fitted_psi(metrics).get(new, {})


def _psi_check_note(fitted: dict[str, Any], new: str, psi: dict[str, Any] | None) -> str:
    """How psi's checks when fitted went (``fitted``: :func:`_psi_fitted`), where the notes need
    it: refused on the validation classes as the gate judges (its row is then the identity: no
    upgrade), or kept yet losing to keeping v1 on the evaluation classes (a disagreement of
    psi's verdict and the gate's, counted in docs/decisions.md)."""
    if "refused" not in fitted:
        return ""
    if fitted["refused"]:
        where = "on the validation classes as the gate judges" if "as the gate judges" in fitted["refused"] else "on held-out training classes"  # fmt: skip
        return (
            f" psi into {new}'s space was refused when fitted ({where}: it did not beat "
            f"{'keeping v1' if 'as the gate judges' in fitted['refused'] else 'no upgrade'}), "
            "so the gallery is left as it is: its row is the identity."
        )
    if psi and psi["lower_bound"] <= 0:
        return (
            " psi was kept by its checks when fitted, yet does not beat keeping v1 on the "
            "evaluation classes with the gate's confidence."
        )
    return ""


def adapters_scratch_notes(metrics: str = SCRATCH) -> str:
    """The reference cells of the scratch table, the target's verdict and the served pairs'
    partial-backfill curves, from a pipeline's committed metrics (experiments/adapters')."""
    from compat.evaluate.adapted import best_served

    cells = _json(f"{metrics}/adapted.json")
    ranked = {b["new"]: b for b in best_served(cells)}
    out: list[str] = []
    target = 0.95
    for new, names in _scratch_models(metrics).items():
        m = cells[names[0]]["metrics"]["identification"]
        t, a = m["top1"], m["mAP"]
        bct = cells[names[0]]["bct"]
        ref = (
            f"BCT's M({bct}, v1) {pair(t.get('bct'), a.get('bct'))}"
            if bct
            else "no BCT version on its data (v1's own)"
        )
        out.append(
            f"{new}: M(v1, v1) {pair(t['old'], a['old'])}, {ref}, a full re-embedding "
            f"M({new}, {new}) {pair(t['self'], a['self'])}."
        )
        # The best configuration compat may serve (kept by its own check when fitted: the gate
        # serves no refused map), as evaluate-adapters ranks them; where every map was refused,
        # the closest.
        b = ranked[new]
        kept = b["best_servable"] is not None
        best = b["best_servable"] or b["best"]
        bt = cells[best]["metrics"]["identification"]["top1"]
        share = _recovery(bt)
        fitted = _psi_fitted(metrics, new)
        beats = bt["adapted_minus_old"]["lower_bound"]
        head = (
            f"Its best served configuration ({best})" if kept else
            f"Every query configuration was refused by its own check when fitted, so none is "
            f"served; the closest ({best})"
        )  # fmt: skip
        lead = (
            f"{head}: {100 * bt['adapted_minus_old']['value']:+.1f} top-1 over M(v1, v1) "
            f"(lower bound {100 * beats:+.1f})"
        )
        if share is not None:
            met = kept and _meets(share, beats, target)
            low = (bt.get("recovery") or {}).get("interval") or [None]
            out.append(
                f"{lead}, {share:.2f} of BCT's M({bct}, v1) top-1"
                + (f" (95% interval {low[0]:.2f} to {low[1]:.2f})" if low[0] is not None else "")
                + f"; target (beat M(v1, v1) with its lower bound and reach {target:.2f} of it) "
                f"for a query configuration: {'met' if met else 'not met'}"
                + (_psi_verdict(bt, target) if _psi_share(bt) else ".")
            )
        else:
            # No BCT version to share against (a model retrained on v1's own data): the gate's
            # comparison alone, keeping v1 against the best (or closest) configuration and psi.
            psi = bt.get("forward_minus_old")
            out.append(
                lead
                + (
                    f"; psi on the gallery M({new}, psi(v1)) {pct(bt['forward'])} top-1 (lower "
                    f"bound {100 * psi['lower_bound']:+.1f} over M(v1, v1))"
                    if psi
                    else ""
                )
                + (
                    ". None beats keeping v1 on the evaluation classes either."
                    if not kept and beats <= 0 and (not psi or psi["lower_bound"] <= 0)
                    else "."
                )
                + _psi_check_note(fitted, new, psi)
            )
        if bt.get("curve") and not fitted.get("refused"):
            curve = ", ".join(pct(p["value"]) for p in bt["curve"])
            how = f"Served through {best}" if kept else f"Through {best}, were it served,"
            out.append(
                f"{how} while psi upgrades v1's gallery (top-1 at 0, 25, 50, 75 and 100% "
                f"upgraded): {curve}."
            )
    return "\n".join(_wrap(" ".join(out)))


# --- the papers' results -------------------------------------------------------------------


def _result5() -> dict[str, str]:
    d = _json("metrics/compat.json")
    m = d["matrix"]["identification"]
    first, last = d["chain"][0], d["chain"][-1]
    lb = d["difference"]["identification"]["top1"][last][first]["lower_bound"]
    return {
        "result": "5 chain v1 -> v2 -> v3",
        "expected": "v3 compatible with v1 (v3 trained against v2 only)",
        "measured": (
            f"M({last},{first}) {pair(_cell(m, 'top1', last, first), _cell(m, 'mAP', last, first))} "
            f"vs M({first},{first}) {pair(_cell(m, 'top1', first, first), _cell(m, 'mAP', first, first))} "
            "(the default chain, metrics/compat.json: each version fine-tunes its parent with "
            "bct's alignment term, so v3 descends from v1's weights through v2)"
        ),
        "verdict": "held" if lb > 0 else "did not hold",
    }


BICT = "experiments/bict/results/lambda.json"


def _spread(s: dict[str, float], n: int) -> str:
    """``mean [min, max]`` over seeds in percent, as experiments/bict/summarize.py writes it in
    experiments/bict/results/lambda.md (its ``spread_text``)."""
    summarize = _script("bict_summarize", ROOT / "experiments" / "bict" / "summarize.py")
    return summarize.spread_text(s, n)


def _by_lambda(per: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(per.items(), key=lambda kv: kv[1]["lambda"]))


def _result7() -> dict[str, str]:
    """The lambda sweep as experiments/bict/summarize.py judged it (results/lambda.json: the
    rules are there and in experiments/bict/results/lambda.md)."""
    s = _json(BICT)
    per, peak = _by_lambda(s["lambda"]), s["peak"]
    key = f"{peak['lambda']:g}"
    shown = [f"{n['lambda']:g}" for n in peak["neighbours"]] + [key]
    backward = ", ".join(
        f"{_spread(per[k]['top1']['backward'], len(per[k]['seeds']))} ({k})"
        for k in sorted(shown, key=float)
    )
    above = [f"{n['lambda']:g}" for n in peak["neighbours"] if n["above_spread"]]
    within = [f"{n['lambda']:g}" for n in peak["neighbours"] if not n["above_spread"]]
    spread = "; ".join(
        [f"above the seed spread of lambda {' and '.join(above)}"] * bool(above)
        + [f"within {'that' if above else 'the seed spread'} of lambda {' and '.join(within)}"]
        * bool(within)
    )
    counts = ", ".join(f"{r['forward_above_backward']}/{len(r['seeds'])}" for r in per.values())
    refused = ", ".join(
        f"{r['psi_refused']}/{len(r['seeds'])} seeds at lambda {k}"
        for k, r in per.items()
        if r["psi_refused"]
    )
    verdict = s["verdict"] + (f" ({'; '.join(s['reasons'])})" if s["reasons"] else "")
    points = len(s["points"])
    above_all = sum(r["forward_above_backward"] for r in per.values())
    rising = sum(_curve_rises(name) for name in s["points"])
    return {
        "result": "7 bict lambda",
        "expected": (
            "M(new, psi(old)) > M(new, old); upgrading more of the gallery raises retrieval "
            "steadily; M(new, old) peaks at an intermediate lambda (judged: the peak, and forward "
            "above backward at every lambda below it)"
        ),
        "measured": (
            f"backward top-1 by lambda, mean [min, max] over seeds: {backward}; peak at lambda "
            f"{key}{f' ({spread})' if spread else ''}; forward above backward on {counts} seeds "
            f"(lambda {', '.join(per)}); psi refused on {refused or 'no point'}; not judged: "
            f"forward above backward on {above_all} of {points} points, a partial-backfill curve "
            f"rising at every step on {rising} of {points} "
            "(experiments/bict/results/lambda.md, with the rules)"
        ),
        "verdict": f"{verdict} (the judged parts)",
    }


def _curve_rises(point: str) -> bool:
    """Whether a sweep point's partial-backfill curve (top-1) rises at every step."""
    d = _json(f"experiments/bict/metrics/{point}/compat.json")
    top1 = d["forward"][point]["metrics"]["identification"]["top1"]
    curve = [c["value"] for c in top1.get("curve") or []]
    return len(curve) > 1 and all(b > a for a, b in itertools.pairwise(curve))


def _result8() -> dict[str, str]:
    s = _json("experiments/sequence/metrics/summary.json")

    def ac_aa(method: str) -> str:
        t = s[method]["identification"]["top1"]
        return f"{t['ac']:.2f} ({pct(t['aa'])}%)"

    hoc = s["hoc-template"]["identification"]["top1"]["ac"]
    return {
        "result": "8 hoc sequence",
        "expected": "AC near 0.95 (hoc) vs near 0 (er)",
        "measured": (
            f"template gallery (the reference's): hoc AC {ac_aa('hoc-template')}, er "
            f"{ac_aa('er-template')}, bct {ac_aa('bct-template')}; instance gallery hoc "
            f"{ac_aa('hoc')}, er {ac_aa('er')}, bct {ac_aa('bct')} ({_sequence_setting()})"
        ),
        "verdict": "held" if hoc >= 0.8 else "did not hold (hoc's AC below 0.8)",
    }


def _sequence_setting() -> str:
    """The sequence protocol as experiments/sequence/params.yaml runs it (one phrase)."""
    import yaml

    params = yaml.safe_load((ROOT / "experiments/sequence/params.yaml").read_text("utf-8"))
    scenario = params["split"]["scenarios"][0]
    tasks = {v: c for v, c in params["train"].items() if v.startswith("hoc-t")}
    epochs = sorted({c["epochs"] for c in tasks.values()})
    samplers = sorted({c.get("sampler", "random") for c in tasks.values()})
    replaced = sorted(
        int(v.split("-t")[1])
        for v, c in tasks.items()
        if str(c.get("parent", "")).startswith("hoc-pre")
    )[1:]  # task 1 starts from pre0: not a replacement
    return (
        f"{scenario['tasks']} tasks, {'/'.join(map(str, epochs))} epochs per task, replay "
        f"{scenario['memory']} images per class, {'/'.join(samplers)} batches, replacements at "
        f"tasks {' and '.join(map(str, replaced))}"
    )


REPRODUCTION = ROOT / "benchmarks" / "results" / "reproduction.json"


def _script(name: str, path: Path) -> Any:
    """A script of the repository loaded as a module (once), to reuse its formatting."""
    import importlib.util

    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _reproduce() -> Any:
    """benchmarks/reproduce.py as a module: its summarize/setting_text turn the per-seed numbers
    into rows (the same functions write benchmarks/results/reproduction.md)."""
    return _script("reproduce", ROOT / "benchmarks" / "reproduce.py")


def reproduction(path: Path | None = None) -> str:
    """Results 1-8: 1-4 and 6 from benchmarks/results/reproduction.json (``path``), re-derived
    from its per-seed numbers by benchmarks/reproduce.py's summarize, 5 from the default chain,
    7 and 8 from the experiments. A single-run file of before the seeds (no ``runs``) gives its
    stored rows."""
    rep = json.loads((path or REPRODUCTION).read_text(encoding="utf-8"))
    seeded = "runs" in rep
    if seeded:
        by_number = {r["result"].split()[0]: r for r in _reproduce().summarize(rep)}
    else:
        by_number = {
            r["result"].split()[0]: {**r, "verdict": "held" if r["held"] else "did not hold"}
            for r in rep["rows"]
        }
    rows = []
    for n in "12345678":
        if n == "5":
            rows.append(_result5())
        elif n == "7":
            rows.append(_result7())
        elif n == "8":
            rows.append(_result8())
        else:
            rows.append(by_number[n])
    over = ""
    if seeded:
        k = len(rep["runs"])
        over = f"; 1-4 and 6: mean [min, max] over {k} seed{'s' * (k != 1)}"
    lines = [
        f"| expected result (docs/reference.md) | expected | measured (top-1 / mAP %, cross = M(new, old){over}) | |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {r['result']} | {r['expected']} | {r['measured']} | {r['verdict']} |" for r in rows
    ]
    if seeded:
        note = (
            "Results 1-4 and 6 (`benchmarks/results/reproduction.json`; the rules and the paired "
            "differences of every seed in `benchmarks/results/reproduction.md`): "
            + _reproduce().setting_text(rep)
            + " Result 5: the default chain's committed run (`metrics/compat.json`, one seed); "
            "7 and 8: `experiments/bict/` and `experiments/sequence/`."
        )
        lines += ["", *_wrap(note)]
    return "\n".join(lines)


def bict_lambda() -> str:
    """Per lambda: each cell's top-1 mean [min, max] over seeds / mAP mean, forward above
    backward on how many seeds, psi refused on how many (experiments/bict/results/lambda.json)."""
    cells = ("old", "backward", "forward", "self")
    head = "| lambda | M(v1, v1) | backward M(v2, v1) | forward M(v2, psi(v1)) | self M(v2, v2) |"
    per = _by_lambda(_json(BICT)["lambda"])
    lines = [
        "| lambda | seeds" + head.removeprefix("| lambda") + " forward > backward | psi refused |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in per.items():
        n = len(r["seeds"])
        row = [key, ", ".join(map(str, r["seeds"]))]
        row += [f"{_spread(r['top1'][c], n)} / {pct(r['mAP'][c]['mean'])}" for c in cells]
        row += [f"{r['forward_above_backward']}/{n}", f"{r['psi_refused']}/{n}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def sequence() -> str:
    s = _json("experiments/sequence/metrics/summary.json")

    def cell(method: str) -> str:
        t = s[method]["identification"]["top1"]
        return f"{t['ac']:.2f} / {pct(t['aa'])}%"

    return "\n".join(
        [
            "| gallery | hoc AC / AA | er AC / AA | bct AC / AA |",
            "|---|---|---|---|",
            f"| template (one mean per class; the reference's) | {cell('hoc-template')} | {cell('er-template')} | {cell('bct-template')} |",
            f"| instance | {cell('hoc')} | {cell('er')} | {cell('bct')} |",
        ]
    )  # fmt: skip


def _sequence_matrix(method: str) -> tuple[list[str], dict[str, Any]]:
    d = _json(f"experiments/sequence/metrics/{method}/compat.json")
    return d["chain"], d["matrix"]["identification"]["top1"]


def _replacements() -> list[str]:
    """The sequence's replacement versions (tasks that start from a pre-trained model, not
    from the task before; task 1 is not a replacement), as experiments/sequence/params.yaml
    trains them."""
    import yaml

    params = yaml.safe_load((ROOT / "experiments/sequence/params.yaml").read_text("utf-8"))
    tasks = {v: c for v, c in params["train"].items() if v.startswith("hoc-t")}
    return sorted((v for v, c in tasks.items() if str(c.get("parent", "")).startswith("hoc-pre")), key=lambda v: int(v.split("-t")[1]))[1:]  # fmt: skip


def sequence_replacements() -> str:
    """Each hoc replacement against every older gallery's own self test, for both galleries:
    where it beats the gallery's model, and where not (experiments/sequence/metrics)."""
    reps = _replacements()
    out = []
    for method, name in (("hoc-template", "template gallery"), ("hoc", "instance gallery")):
        chain, m = _sequence_matrix(method)
        pairs = [(r, g) for r in reps for g in chain[: chain.index(r)]]
        lost = [(r, g) for r, g in pairs if not m[r][g] > m[g][g]]
        short = lambda v: v.removeprefix("hoc-")  # noqa: E731
        if not lost:
            out.append(
                f"On the {name} each replacement ({', '.join(map(short, reps))}) searches every "
                f"older gallery better than that gallery's own model ({len(pairs)} of "
                f"{len(pairs)} pairs)."
            )
        else:
            worse = ", ".join(f"{short(r)} on {short(g)} {pct(m[r][g])} against {pct(m[g][g])}" for r, g in lost)  # fmt: skip
            out.append(
                f"On the {name} a replacement beats the older gallery's own model on "
                f"{len(pairs) - len(lost)} of {len(pairs)} pairs; not on {worse} (top-1)."
            )
    return "\n".join(_wrap(" ".join(out)))


def _sequence_gallery(gallery: str) -> str:
    """The sequence's AC/AA/BC/FC table and matrices for one gallery kind, as
    experiments/sequence/summarize.py prints them, from its committed metrics."""
    import yaml

    folder = ROOT / "experiments" / "sequence"
    summarize = _script("sequence_summarize", folder / "summarize.py")
    sections = yaml.safe_load((folder / "evaluate.yaml").read_text("utf-8"))
    train = yaml.safe_load((folder / "params.yaml").read_text("utf-8")).get("train", {})
    marks = set().union(*(summarize.replaced(train, s["chain"]) for s in sections.values()))
    group = {
        name: _json(f"experiments/sequence/metrics/{name}/compat.json")
        for name, section in sections.items()
        if section.get("gallery", "instance") == gallery
    }
    return summarize.markdown(group, marks, "identification", "top1")


def sequence_instance() -> str:
    return _sequence_gallery("instance")


def sequence_template() -> str:
    return _sequence_gallery("template")


def sequence_targets() -> str:
    """The sequence experiment against the paper's targets (issue 13's), per gallery kind, from
    experiments/sequence/metrics/summary.json."""
    s = _json("experiments/sequence/metrics/summary.json")

    def row(target: str, cell: Callable[[str], str]) -> str:
        return f"| {target} | {cell('')} | {cell('-template')} |"

    def ac(g: str) -> str:
        t = s["hoc" + g]["identification"]["top1"]
        chain, _ = _sequence_matrix("hoc" + g)
        n = len(chain) * (len(chain) - 1) // 2
        met = "met" if t["ac"] >= 0.8 else "**not met**"
        return f"{t['ac']:.2f}: {met} ({round(t['ac'] * n)} of {n} pairs)"

    def aa(g: str) -> str:
        hoc, er = (s[m + g]["identification"]["top1"]["aa"] for m in ("hoc", "er"))
        return f"{pct(hoc)}% against {pct(er)}%: {'met' if hoc >= er else 'not met'}"

    def er(g: str) -> str:
        v = s["er" + g]["identification"]["top1"]["ac"]
        return f"{v:.2f}: {'met' if v <= 0.2 else 'not met'}"

    def rises(g: str) -> str:
        reps = s["hoc" + g]["replacement"]
        steps = [f"{pct(r['aa_before'])}% -> {pct(r['aa_with'])}% at {v.removeprefix('hoc-')}" for v, r in reps.items()]  # fmt: skip
        ok = all(r["aa_with"] > r["aa_before"] for r in reps.values())
        return ", ".join(steps) + f": {'met' if ok else 'not met'}"

    return "\n".join(
        [
            "| target | instance gallery | template gallery (the reference's) |",
            "|---|---|---|",
            row("hoc AC >= 0.8", ac),
            row("hoc AA at least er's", aa),
            row("er AC <= 0.2", er),
            row("hoc's AA rises at each replacement", rises),
        ]
    )


def sequence_instance_map_ac() -> str:
    """hoc's AC by mAP on the instance gallery (inline)."""
    return f"{_json('experiments/sequence/metrics/summary.json')['hoc']['identification']['mAP']['ac']:.2f}"


def sequence_source() -> str:
    """The sequence experiment's source size (inline): classes x images per class."""
    import yaml

    data = yaml.safe_load((ROOT / "experiments/sequence/params.yaml").read_text("utf-8"))["data"]
    return f"{data['classes']:,} x {data['images_per_class']}"


def _short_gain(g: dict[str, Any]) -> str:
    """``64%``, or ``110% (not meaningful)`` for a gain the evaluation marked so (the reason is
    in docs/results.md beside the interval)."""
    return f"{pct(g['value'], 0)}%" + ("" if g.get("meaningful") else " (not meaningful)")


def headline() -> str:
    """The README's few sentences: the criterion on the chain, the gains against both
    paragons, psi's outcome."""
    d = _json("metrics/compat.json")
    chain = d["chain"]
    diff = d["difference"]["identification"]["top1"]
    crosses = [(q, g) for i, q in enumerate(chain) for g in chain[:i]]
    held = [(q, g) for q, g in crosses if (diff.get(q, {}).get(g) or {}).get("lower_bound", -1) > 0]
    out = []
    if len(held) == len(crosses):
        out.append(
            f"Every new version's queries search every older gallery better than that gallery's "
            f"own model, with 95% confidence ({len(crosses)} of {len(crosses)} pairs; "
            f"{chain[-1]} was trained against {chain[-2]} only)."
        )
    else:
        failed = ", ".join(f"M({q}, {g})" for q, g in crosses if (q, g) not in held)
        out.append(f"The criterion does not hold with 95% confidence for {failed}.")
    gains = d["gain"]["identification"]["top1"]
    fine = ", ".join(_short_gain(g) for per in gains.values() for g in per.values())
    pairs = ", ".join(f"{n} over {o}" for n, per in gains.items() for o in per)
    text = (
        f"Update gains ({pairs}; top-1): {fine} against the {_paragon_kind(d['paragon'])} paragons"
    )
    other = ROOT / OTHER_PARAGONS / "metrics" / "compat.json"
    if other.exists():
        o = json.loads(other.read_text(encoding="utf-8"))
        a = o["gain"]["identification"]["top1"]
        kind = _paragon_kind(o["paragon"], f"{OTHER_PARAGONS}/params.yaml")
        others = ", ".join(_short_gain(g) for per in a.values() for g in per.values())
        text += f", {others} against the {kind} paragons of {OTHER_PARAGONS}"
    out.append(
        text + " ([what the two paragons are](docs/concepts.md#the-paragon-and-the-update-gain))."
    )
    for new, fwd in d.get("forward", {}).items():
        psi = fwd.get("psi") or {}
        old = fwd["from"]
        if psi.get("refused"):
            out.append(
                f"psi ({old} -> {new}) was refused on this run: it did not beat leaving {old}'s "
                "gallery alone on held-out training classes with 95% confidence, so nothing is "
                "upgraded."
            )
        elif "refused" in psi:
            t = fwd["metrics"]["identification"]["top1"]
            out.append(
                f"psi ({old} -> {new}) was kept on this run: M({new}, psi({old})) "
                f"{pct(t['forward'])} against M({new}, {old}) {pct(t['backward'])} top-1."
            )
    env = d.get("environment")
    if env:
        out.append(f"Produced on: {_machine(env)}.")
    return "\n".join(_wrap(" ".join(out)))


FIRST_SESSION = "docs/first-session.txt"


def _session_checks(text: str) -> list[str]:
    """Every number of the recorded session's verdict tables and gain lines that differs from
    metrics/compat.json (empty: the session was recorded on the committed weights)."""
    d = _json("metrics/compat.json")
    m, diff, gains = d["matrix"], d["difference"], d["gain"]
    wrong: list[str] = []
    version, header = None, None
    for line in text.splitlines():
        if head := re.match(r"^(\S+) vs (\S+)$", line):
            version = head.group(1)
        if gain := re.match(r"^update gain (\S+) (\S+) vs \S+: ([-\d.]+)%", line):
            proto, metric, shown = gain.groups()
            value = gains[proto][metric][version][next(iter(gains[proto][metric][version]))][
                "value"
            ]
            if shown != f"{100 * value:.1f}":
                wrong.append(f"{line!r}: metrics say {100 * value:.1f}%")
        if not line.startswith("|") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "protocol" in cells:
            header = cells
            continue
        if header is None or len(cells) != len(header):
            continue
        row = dict(zip(header, cells, strict=True))
        q, g, proto, metric = (
            row.get("query", version),
            row["gallery"],
            row["protocol"],
            row["metric"],
        )
        d_ = diff[proto][metric][q][g]
        expect = {
            "new": f"{m[proto][metric][q][g]:.4f}",
            "baseline": f"{m[proto][metric][g][g]:.4f}",
            "difference": f"{d_['value']:+.4f}",
            "lower bound": f"{d_['lower_bound']:+.4f}" if row["lower bound"] != "-" else "-",
            "gain": f"{100 * gains[proto][metric][q][g]['value']:.1f}%",
        }
        for key, value in expect.items():
            if row[key] != value:
                wrong.append(f"{q} on {g}, {proto} {metric}, {key}: session {row[key]}, metrics {value}")  # fmt: skip
    return wrong


def first_session() -> str:
    """The README's first session as recorded by scripts/first_session.py, every number of its
    verdicts checked against metrics/compat.json."""
    text = (ROOT / FIRST_SESSION).read_text(encoding="utf-8")
    wrong = _session_checks(text)
    if wrong:
        raise SystemExit(
            f"error: {FIRST_SESSION} disagrees with metrics/compat.json ({'; '.join(wrong[:3])}): "
            "record it again with python scripts/first_session.py"
        )
    return "```console\n" + text.rstrip("\n") + "\n```"


def _console(command: list[str], output: str) -> str:
    return "\n".join(["```console", "$ " + " ".join(command), output.rstrip("\n"), "```"])


def metrics_show() -> str:
    """``dvc metrics show`` on the committed metrics, as DVC prints it (200 columns)."""
    import os

    dvc = str(Path(sys.executable).with_name("dvc"))
    r = subprocess.run(
        [dvc, "metrics", "show"], cwd=ROOT, capture_output=True, text=True, check=True,
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    return _console(["dvc", "metrics", "show"], r.stdout)


def contract_validate() -> str:
    """``compat contract validate contracts/*.yaml`` on the committed contracts."""
    import os

    from typer.testing import CliRunner

    from compat.cli.main import app

    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "contracts").glob("*.yaml"))
    here = os.getcwd()
    try:
        os.chdir(ROOT)
        r = CliRunner().invoke(app, ["contract", "validate", *files])
    finally:
        os.chdir(here)
    if r.exit_code != 0:
        raise SystemExit(f"error: compat contract validate exited {r.exit_code}: {r.output}")
    return _console(["compat", "contract", "validate", "contracts/*.yaml"], r.output)


def _decisions() -> Any:
    """scripts/decisions.py: the decision table, the maps' verdict agreement and what the upgrade
    stage decided of each psi (issue 42)."""
    return _script("decisions", ROOT / "scripts" / "decisions.py")


GENERATORS: dict[str, Callable[[], str]] = {
    "decisions": lambda: _decisions().decision_table(),
    "map-verdicts": lambda: _decisions().map_verdicts(),
    "default-chain": default_chain,
    "default-chain-notes": default_chain_notes,
    "default-chain-spread": default_chain_spread,
    "hard": hard,
    "hard-notes": hard_notes,
    "headline": headline,
    "metrics-show": metrics_show,
    "contract-validate": contract_validate,
    "first-session": first_session,
    "sequence-replacements": sequence_replacements,
    "sequence-source": sequence_source,
    "sequence-instance": sequence_instance,
    "sequence-targets": sequence_targets,
    "sequence-instance-map-ac": sequence_instance_map_ac,
    "sequence-template": sequence_template,
    "adapters": adapters,
    "adapters-notes": adapters_notes,
    "adapters-scratch": adapters_scratch,
    "adapters-scratch-notes": adapters_scratch_notes,
    "glyphs-scratch": functools.partial(adapters_scratch, GLYPHS),
    "glyphs-scratch-notes": functools.partial(adapters_scratch_notes, GLYPHS),
    "reproduction": reproduction,
    "bict-lambda": bict_lambda,
    "sequence": sequence,
}


def _wrap(text: str, width: int = 100) -> list[str]:
    lines, line = [], ""
    for word in text.split(" "):
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines


def documents(root: Path | None = None) -> list[Path]:
    """Every document that may hold generated numbers: the README, docs/*.md and each
    experiment's README."""
    root = root or ROOT
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *sorted(root.glob("experiments/*/README.md"))]  # fmt: skip


def render(text: str, cache: dict[str, str] | None = None, where: str = "README.md") -> tuple[str, list[str]]:  # fmt: skip
    """``text`` with every block and inline value regenerated, and the names of those that
    changed. ``cache`` keeps each generator's output for the other documents of one run."""
    cache = {} if cache is None else cache
    changed: list[str] = []

    def generated(name: str) -> str:
        if name not in GENERATORS:
            raise SystemExit(f"error: {where}: block {name!r}: no generator; known: {', '.join(GENERATORS)}")  # fmt: skip
        if name not in cache:
            cache[name] = GENERATORS[name]()
        return cache[name]

    def block(m: re.Match[str]) -> str:
        body = generated(m.group(2)) + "\n"
        if body != m.group(3):
            changed.append(m.group(2))
        return m.group(1) + body + m.group(4)

    def inline(m: re.Match[str]) -> str:
        value = generated(m.group(2))
        if value != m.group(3):
            changed.append(m.group(2))
        return m.group(1) + value + m.group(4)

    return INLINE.sub(inline, BLOCK.sub(block, text)), changed


def snapshot(commit: str) -> Path:
    """metrics/runs/COMMIT.json: COMMIT's identification matrix and forward top-1, from git."""

    def show(rel: str) -> Any:
        out = subprocess.run(["git", "show", f"{commit}:{rel}"], cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
        return json.loads(out.stdout)

    d = show("metrics/compat.json")
    m = d["matrix"]["identification"]
    record = {
        "commit": commit,
        "machine": "the machine that produced that commit's metrics",
        "identification": {k: m[k] for k in ("top1", "mAP")},
        "forward": {
            new: {
                "top1": f["metrics"]["identification"]["top1"]["forward"],
                "backward_top1": f["metrics"]["identification"]["top1"]["backward"],
            }
            for new, f in d.get("forward", {}).items()
        },
    }
    path = ROOT / "metrics" / "runs" / f"{commit}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs; write nothing")
    ap.add_argument("--snapshot", metavar="COMMIT", help="keep COMMIT's metrics as another run")
    a = ap.parse_args(argv)
    if a.snapshot:
        print(f"wrote {snapshot(a.snapshot).relative_to(ROOT)}")
        return 0
    cache: dict[str, str] = {}
    stale: list[str] = []
    for path in documents():
        where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        text = path.read_text(encoding="utf-8")
        new, changed = render(text, cache, where)
        if not changed:
            continue
        stale.append(f"{where}: {', '.join(changed)}")
        if not a.check:
            from compat.io import atomic_path

            with atomic_path(path) as tmp:
                tmp.write_text(new, encoding="utf-8")
    if a.check:
        if stale:
            print(f"blocks out of date with the committed metrics: {'; '.join(stale)}; run python scripts/readme_numbers.py", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    print(f"{len(stale)} document(s) rewritten" + (f": {'; '.join(stale)}" if stale else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
