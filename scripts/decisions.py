"""The decision table (issue 42 item 5): for each way to move to a new model, what it costs and
what it delivered on each pipeline the project runs, generated from the committed metrics.

Ways: keep the old model; BCT training (the new model trained to be compatible); a query
adapter, a query blend (:mod:`compat.maps`; a model trained elsewhere, the stored gallery kept);
psi backfill (the stored rows mapped into the new space, BiCT); a full re-embedding of the
gallery. Costs are what each way adds: to training, to every query, to the stored gallery
(forward passes, and the maps' measured fit time and apply cost from ``metrics/adapters.json``).
Results are identification top-1 on the old model's gallery of each pipeline's evaluation set,
with the paired bootstrap's 95% lower bound of the difference to keeping the old model where
the metrics hold it, and whether the configuration is served at all (a map its own check refused
never is).

Used by scripts/readme_numbers.py (``<!-- numbers: decisions -->``); run alone it prints the
table.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = {
    "default pipeline": "metrics",
    "experiments/adapters": "experiments/adapters/metrics",
    "experiments/glyphs": "experiments/glyphs/metrics",
    "experiments/hard": "experiments/hard/metrics",
}


def _json(rel: str) -> Any:
    path = ROOT / rel
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _pct(x: float | None) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _bound(lb: float | None) -> str:
    return "" if lb is None else f", bound {100 * lb:+.1f}"


def _role(entry: dict[str, Any], fits: dict[str, Any], name: str) -> str:
    """An adapted entry's role: its map's provenance, else its fit (older metrics: adapters)."""
    role = (entry.get("map") or {}).get("role") or (fits.get(name) or {}).get("role")
    if role == "query-blend" or (fits.get(name) or {}).get("blend"):
        return "query-blend"
    return role or "query-adapter"


def _best_map(folder: str, role: str) -> list[str]:
    """Per new model of the pipeline, its best served configuration of ``role`` (highest lower
    bound of M(served, old) - M(old, old)), as one cell line each."""
    cells = _json(f"{folder}/adapted.json") or {}
    fits = _json(f"{folder}/adapters.json") or {}
    best: dict[str, tuple[float, str]] = {}
    for name, entry in cells.items():
        if _role(entry, fits, name) != role:
            continue
        t = entry["metrics"]["identification"]["top1"]
        d = t["adapted_minus_old"]
        lb = d.get("lower_bound", d.get("value"))
        fit = fits.get(name) or {}
        kind = fit.get("kind") or (entry.get("map") or {}).get("kind", "?")
        blend = fit.get("blend") or {}
        what = kind + (f" w {blend['weight']:g}" if blend.get("weight") is not None else "")
        served = "refused by its check" if fit.get("refused") else "kept"
        share = (t.get("recovery") or {}).get("value")
        text = (
            f"{entry['new']}: {_pct(t['adapted'])}{_bound(lb)} ({what}, {served}"
            + (f"; {share:.2f} of BCT's" if share is not None else "")
            + ")"
        )
        key = -math.inf if lb is None else lb
        if entry["new"] not in best or key > best[entry["new"]][0]:
            best[entry["new"]] = (key, text)
    return [text for _, text in best.values()]


def fitted_psi(folder: str) -> dict[str, dict[str, Any]]:
    """What the upgrade stage decided of each psi a pipeline evaluated (its ``compat.json``
    forward provenance), by the version psi maps into: ``refused`` is its reason, or None when
    kept; {} without a forward section."""
    forward = (_json(f"{folder}/compat.json") or {}).get("forward", {})
    return {new: f.get("psi") or {} for new, f in forward.items()}


def _psi(folder: str) -> list[str]:
    """psi's forward cells: an outside model's (adapted entries), else the chain's
    (forward.json)."""
    out: dict[str, str] = {}
    fitted = fitted_psi(folder)
    for entry in (_json(f"{folder}/adapted.json") or {}).values():
        t = entry["metrics"]["identification"]["top1"]
        if "forward" in t and entry["new"] not in out:
            lb = (t.get("forward_minus_old") or {}).get("lower_bound")
            refused = " (psi refused: the identity)" if fitted.get(entry["new"], {}).get("refused") else ""  # fmt: skip
            out[entry["new"]] = f"{entry['new']}: {_pct(t['forward'])}{_bound(lb)}{refused}"
    if not out:
        for version, per in (_json(f"{folder}/forward.json") or {}).items():
            t = per.get("identification", {}).get("top1")
            if t is not None:
                refused = " (psi refused: the identity)" if t["forward"] == t["backward"] else ""
                out[version] = f"{version}: {_pct(t['forward'])}{refused}"
    return list(out.values())


def _chain(folder: str) -> dict[str, Any] | None:
    c = _json(f"{folder}/compat.json")
    if c is None:
        return None
    m, first, last = c["matrix"]["identification"]["top1"], c["chain"][0], c["chain"][-1]
    d = c["difference"]["identification"]["top1"].get(last, {}).get(first, {})
    return {"first": first, "last": last, "m": m, "bound": d.get("lower_bound")}


def _reembed(folder: str, chain: dict[str, Any]) -> list[str]:
    """M(new, new) of BCT's last version and of each outside model."""
    out = [f"{chain['last']}: {_pct(chain['m'][chain['last']][chain['last']])}"]
    seen = set()
    for entry in (_json(f"{folder}/adapted.json") or {}).values():
        if entry["new"] not in seen:
            seen.add(entry["new"])
            t = entry["metrics"]["identification"]["top1"]
            out.append(f"{entry['new']}: {_pct(t['self'])}")
    return out


def _costs() -> dict[str, tuple[str, str, str]]:
    """(training, per query, gallery work) of each way; the maps' fit and apply numbers from
    the default pipeline's metrics/adapters.json (its first map of each role)."""
    fits = _json("metrics/adapters.json") or {}
    adapter = next((f for f in fits.values() if not f.get("blend")), None)
    blend = next((f for f in fits.values() if f.get("blend")), None)

    def fit(f: dict[str, Any] | None) -> str:
        return "" if f is None else f" ({f['kind']}: {f['fit_seconds']:.2f} s on {f['fit_pairs']:,} pairs)"  # fmt: skip

    def apply(f: dict[str, Any] | None) -> str:
        return "" if f is None else f" ({f['apply_us_per_query']:.1f} us)"

    return {
        "keep the old model": ("none", "1 forward pass (old model)", "none"),
        "BCT training": (
            "the new model trained against the old one (its classifier, and by default an l2 "
            "term on its embeddings): one frozen old-model forward pass per batch; needs the old "
            "model when the new one is trained",
            "1 forward pass (new model)",
            "none",
        ),
        "query adapter": (
            "none to the new model; a map fitted on the same images embedded by both"
            + fit(adapter),
            "1 forward pass (new model) + the map" + apply(adapter),
            "none",
        ),
        "query blend": (
            "as the adapter, plus the weight selected on held-out classes" + fit(blend),
            "2 forward passes (new and old model) + the map and the interpolation" + apply(blend),
            "none; the old model stays deployed to embed queries",
        ),
        "psi backfill": (
            "psi fitted on the new model's training split (the upgrade stage)",
            "1 forward pass (new model)",
            "psi over every stored row (no images needed), once",
        ),
        "full re-embedding": (
            "none",
            "1 forward pass (new model)",
            "every stored image embedded again by the new model (the images needed), once",
        ),
    }


def decision_table() -> str:
    """The table: one row per way, its costs, then per pipeline what it delivered."""
    chains = {name: _chain(folder) for name, folder in PIPELINES.items()}
    names = [n for n, c in chains.items() if c is not None]
    head = ["way", "training", "per query", "gallery work", *names]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    costs = _costs()
    for way, (training, query, gallery) in costs.items():
        cells = []
        for name in names:
            folder, c = PIPELINES[name], chains[name]
            assert c is not None
            if way == "keep the old model":
                lines = [f"M({c['first']}, {c['first']}): {_pct(c['m'][c['first']][c['first']])}"]
            elif way == "BCT training":
                lines = [f"{c['last']}: {_pct(c['m'][c['last']][c['first']])}{_bound(c['bound'])}"]
            elif way == "query adapter":
                lines = _best_map(folder, "query-adapter")
            elif way == "query blend":
                lines = _best_map(folder, "query-blend")
            elif way == "psi backfill":
                lines = _psi(folder)
            else:
                lines = _reembed(folder, c)
            cells.append("<br>".join(lines) if lines else "not measured")
        rows.append(f"| {way} | {training} | {query} | {gallery} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(decision_table())


def verdict_agreement(folder: str) -> dict[str, Any] | None:
    """How often a pipeline's maps' own check and the gate's criterion on the evaluation set
    disagree: maps kept by their check that do not pass (``kept_failing``; of them, losing to
    keeping the old model beyond the interval, ``kept_losing``: the difference's upper bound
    below 0) and maps refused that pass (``refused_passing``); the outside models with a psi
    (``psi``) and those whose psi was kept when fitted yet loses beyond the interval
    (``psi_kept_losing``: with a validation split, only a psi fitted with ``refuse: false`` or
    between other widths can). None without maps."""
    cells = _json(f"{folder}/adapted.json") or {}
    fits = _json(f"{folder}/adapters.json") or {}
    names = [n for n in cells if n in fits]
    if not names:
        return None
    out: dict[str, Any] = {"maps": len(names), "decided_on": set(), "kept_failing": [],
                           "kept_losing": [], "refused_passing": []}  # fmt: skip
    for name in names:
        t = cells[name]["metrics"]["identification"]["top1"]
        d, kept = t["adapted_minus_old"], not fits[name]["refused"]
        hi = (d.get("interval") or [None, None])[1]
        out["decided_on"].add("validation classes" if fits[name].get("verdict") else
                              "held-out training classes")  # fmt: skip
        if kept and not t["passes"]:
            out["kept_failing"].append(name)
            if hi is not None and hi < 0:
                out["kept_losing"].append(name)
        if not kept and t["passes"]:
            out["refused_passing"].append(name)
    out["decided_on"] = sorted(out["decided_on"])
    # psi of an outside model (its forward cell beside the maps): kept when fitted (its checks
    # in the upgrade stage) yet losing to keeping the old model on the evaluation classes.
    fitted = fitted_psi(folder)
    psis: dict[str, bool] = {}
    for name in names:
        t, new = cells[name]["metrics"]["identification"]["top1"], cells[name]["new"]
        psi = fitted.get(new, {})
        if "forward_minus_old" in t and new not in psis and "refused" in psi:
            hi = (t["forward_minus_old"].get("interval") or [None, None])[1]
            psis[new] = not psi["refused"] and hi is not None and hi < 0
    out["psi"] = sorted(psis)
    out["psi_kept_losing"] = sorted(n for n, losing in psis.items() if losing)
    return out


def map_verdicts() -> str:
    """One sentence per pipeline with maps: how often the maps' check and the gate disagreed."""
    lines = []
    for name, folder in PIPELINES.items():
        a = verdict_agreement(folder)
        if a is None:
            continue
        parts = [
            f"{len(a['kept_failing'])} kept by their check without passing the gate"
            + (f" ({', '.join(a['kept_failing'])})" if a["kept_failing"] else ""),
            f"{len(a['kept_losing'])} of them losing to keeping the old model beyond the interval",
            f"{len(a['refused_passing'])} refused that would pass"
            + (f" ({', '.join(a['refused_passing'])})" if a["refused_passing"] else ""),
        ]
        if a["psi"]:
            losing = a["psi_kept_losing"]
            parts.append(
                f"psi of {len(a['psi'])} outside model(s): {len(losing)} kept when fitted while "
                "losing to keeping the old model beyond the interval"
                + (f" ({', '.join(losing)})" if losing else "")
            )
        lines.append(
            f"- {name}: {a['maps']} maps, checked on {' and '.join(a['decided_on'])}: "
            + "; ".join(parts)
            + "."
        )
    return "\n".join(lines)
