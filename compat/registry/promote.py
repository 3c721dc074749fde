"""``compat promote <version> --against <version>``: gate a version on its contract, then move
the ``production`` alias with a compare-and-set.

Order of work: load the contract; read the registered versions (parent, transitive ancestors,
paragon); check the contract's declared facts against the card; get every needed embedding of
the evaluation set (the embedding cache, else the model's weights from the registry or
``models/``, else a registered embeddings bundle); when a criterion uses ``forward``, upgrade the
parent's embeddings with the version's psi from ``models/<version>/upgrade/``; judge every
criterion; record the verdict, matrix, intervals and update gain on the version (tags,
description, a JSON report artifact);
then, only if everything passed, under the promotion lock: resolve any promotion a crash left
pending, check that ``production`` still points at ``--against``, log ``pending``, move the
alias, log ``committed``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compat.contracts.gate import Verdict, check_facts, judge
from compat.contracts.schema import Contract, contract_digest, load_contract
from compat.errors import BadInputError, ConflictError, NotFoundError, UsageError
from compat.registry.promotions import PromotionLog, now, promotion_lock, who
from compat.registry.store import Registry, VersionRecord, tag_key


class PromotionConflict(ConflictError):
    """``production`` moved away from ``--against`` before this promotion could move it."""


@dataclass
class Paths:
    contracts: Path = Path("contracts")
    models: Path = Path("models")
    eval_manifest: Path = Path("splits/eval.json")
    source: Path = Path("data/source.json")
    cache: Path = Path("cache/embeddings")
    params: Path = Path("params.yaml")


def params_paragon(params: Path, version: str) -> str | None:
    """The paragon ``params.yaml`` names for ``version`` (``evaluate.paragon``), if any.

    Only the ``evaluate`` section is read and validated: promote must not fail on a params file
    whose other sections belong to a newer pipeline.
    """
    if not params.is_file():
        return None
    from compat.evaluate.config import read_evaluate_section

    cfg = read_evaluate_section(params)
    if cfg is None:
        return None
    return cfg.paragon.get(version)


@dataclass
class Outcome:
    report: dict[str, Any]
    verdict: Verdict
    moved: bool = False
    exit_code: int = 0
    messages: list[str] = field(default_factory=list)


def _card_of(rec: VersionRecord) -> dict[str, Any]:
    return {
        "parent": rec.tags.get("compat.parent") or None,
        "dim": rec.tags.get("compat.dim", "-1"),
        "head": rec.tags.get("compat.head") or None,
    }


def _download(reg: Registry, rec: VersionRecord, artifact: str) -> Path:
    from mlflow.artifacts import download_artifacts

    dst = Path(tempfile.mkdtemp(prefix=f"compat-{rec.name}-"))
    try:
        return Path(
            download_artifacts(
                run_id=rec.run_id, artifact_path=artifact, dst_path=str(dst), tracking_uri=reg.uri
            )
        )
    except Exception as err:
        raise NotFoundError(
            f"{rec.name}: artifact {artifact!r} of run {rec.run_id} could not be read: {err}"
        ) from None


def _model_folder(reg: Registry, rec: VersionRecord, models_dir: Path) -> Path:
    """The version's weights folder: local ``models/<v>`` if its digest matches, else the registry's copy."""
    local = models_dir / rec.name
    card = local / "card.json"
    if card.is_file():
        try:
            if json.loads(card.read_text()).get("weights_sha256") == rec.tags.get(
                "compat.weights_sha256"
            ):
                return local
        except json.JSONDecodeError:
            pass
    return _download(reg, rec, "model")


def _bundle_rows(reg: Registry, rec: VersionRecord, manifest: Any) -> np.ndarray:
    from compat.embeddings.bundle import load_bundle

    folder = _download(reg, rec, "embeddings")
    files = sorted(folder.glob("*.npz"))
    if not files:
        raise NotFoundError(f"{rec.name}: no embeddings bundle among its artifacts")
    b = load_bundle(files[0])
    items = list(manifest.items)
    if b.ids is not None:
        index = {i: k for k, i in enumerate(b.ids)}
        missing = [i for i in items if i not in index]
        if missing:
            raise BadInputError(
                f"{files[0].name}: ids: {len(missing)} evaluation item(s) missing, e.g. {missing[:3]}"
            )
        return b.embeddings[[index[i] for i in items]]
    if b.embeddings.shape[0] != len(items):
        raise BadInputError(
            f"{files[0].name}: embeddings: {b.embeddings.shape[0]} rows but the evaluation set has {len(items)} "
            "items (store ids, or rows in splits/eval.json order)"
        )
    return b.embeddings


def gather_embeddings(
    reg: Registry, names: list[str], paths: Paths, records: dict[str, VersionRecord]
) -> tuple[Any, dict[str, np.ndarray], str]:
    """Evaluation-set embeddings of every named version, through the embedding cache."""
    from compat.data.split import load_eval_manifest
    from compat.embeddings.cache import EmbeddingCache
    from compat.evaluate.runner import data_fingerprint, embed_versions

    manifest = load_eval_manifest(paths.eval_manifest)
    out: dict[str, np.ndarray] = {}
    model_versions = []
    for name in names:
        rec = records[name]
        if rec.tags.get("compat.kind") == "embeddings":
            out[name] = _bundle_rows(reg, rec, manifest)
        else:
            model_versions.append(name)
    data_fp = ""
    if model_versions:
        from compat.data.sources import open_source
        from compat.embeddings.embed import cache_key

        source = open_source(paths.source)
        data_fp = data_fingerprint(source.fingerprint, manifest.fingerprint)
        cache = EmbeddingCache(paths.cache)
        missing = []
        for name in model_versions:
            key = cache_key(records[name].tags.get("compat.weights_sha256", ""), data_fp)
            hit = cache.get(key, ids=list(manifest.items))
            if hit is None:
                missing.append(name)
            else:
                out[name] = hit.embeddings

        def load_model(name: str) -> tuple[Any, dict[str, Any]]:
            from compat.models import load_version

            return load_version(_model_folder(reg, records[name], paths.models))

        if missing:
            out.update(embed_versions(missing, manifest, source.load, data_fp, load_model, cache))
    return manifest, out, data_fp


def upgraded_parent(
    contract: Contract,
    records: dict[str, VersionRecord],
    paths: Paths,
    embeddings: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray] | None, dict[str, Any] | None]:
    """The parent's embeddings upgraded by the version's psi (``models/<version>/upgrade/``),
    when a criterion uses ``forward``; else (None, None)."""
    if not any(c.uses_forward for c in contract.criteria):
        return None, None
    from compat.models.upgrade import load_upgrade, upgrade_array, upgrade_folder

    new, parent = contract.version, contract.parent
    assert parent is not None
    folder = upgrade_folder(paths.models, new)
    psi, card = load_upgrade(folder)
    where = folder / "card.json"
    if (card["from"], card["to"]) != (parent, new):
        raise BadInputError(
            f"{where}: from/to: psi upgrades {card['from']} -> {card['to']}, the contract needs "
            f"{parent} -> {new}"
        )
    for role, name in (("from", parent), ("to", new)):
        rec = records[name]
        fitted = card.get(f"{role}_weights_sha256")
        registered = rec.tags.get("compat.weights_sha256")
        # Only a model version's tag names model weights (an embeddings bundle's names the file).
        if (
            rec.tags.get("compat.kind") == "model"
            and fitted
            and registered
            and fitted != registered
        ):
            raise BadInputError(
                f"{where}: {role}_weights_sha256: psi was fitted on other {name} weights than the "
                f"registered ones ({fitted[:12]}... vs {registered[:12]}...); re-run upgrade@{new}"
            )
    if embeddings[parent].shape[1] != int(card["in_dim"]):
        raise BadInputError(
            f"{where}: in_dim: psi takes {card['in_dim']}-dim rows, {parent}'s embeddings have "
            f"{embeddings[parent].shape[1]}"
        )
    info = {"path": str(folder), "weights_sha256": card["weights_sha256"], "from": parent}
    return {parent: upgrade_array(psi, embeddings[parent])}, info


def _describe(verdict: Verdict, against: str | None) -> str:
    status = "PASSED" if verdict.passed else "FAILED"
    parts = [f"{verdict.version} {status} its compatibility contract against {verdict.parent}"]
    for r in verdict.results:
        mark = "ok" if r.passed else "FAIL"
        bound = f", lower bound {r.lower_bound:.4f}" if r.lower_bound is not None else ""
        diff = "n/a" if r.difference is None else f"{r.difference:+.4f}"
        parts.append(f"[{mark}] {r.description}: {r.lhs_value} vs {r.rhs_value} ({diff}{bound})")
    for p, per in verdict.gain.items():
        for m, g in per.items():
            if g.get("value") is not None:
                parts.append(f"update gain {p} {m} vs {g['paragon']}: {g['value']:.1%}")
    if against:
        parts.append(f"promotion requested against {against}")
    return "; ".join(parts) + "."


def promote(
    version: str,
    against: str | None,
    *,
    reg: Registry,
    paths: Paths | None = None,
    paragon: str | None = None,
    resamples: int = 1000,
    seed: int = 0,
    dry_run: bool = False,
) -> Outcome:
    """Gate ``version`` on its contract and, if it passes, make it ``production``."""
    paths = paths or Paths()
    contract_path = paths.contracts / f"{version}.yaml"
    contract: Contract = load_contract(contract_path)
    paragon = paragon or contract.paragon or params_paragon(paths.params, version)
    rec = reg.get(version)
    check_facts(contract, _card_of(rec), f"{contract_path}")
    if contract.parent is None:
        return _promote_root(reg, rec, contract_path, against, dry_run)
    names = [version, contract.parent, *contract.transitive] + ([paragon] if paragon else [])
    records = {n: reg.get(n) for n in dict.fromkeys(names)}
    if against is not None and reg.find(against) is None:
        raise NotFoundError(f"--against {against!r} is not registered")

    manifest, embeddings, data_fp = gather_embeddings(reg, list(records), paths, records)
    upgraded, psi_info = upgraded_parent(contract, records, paths, embeddings)
    verdict = judge(
        contract,
        manifest,
        embeddings,
        paragon=paragon,
        resamples=resamples,
        seed=seed,
        upgraded=upgraded,
    )
    report = {
        "version": version,
        "against": against,
        "parent": contract.parent,
        "transitive": contract.transitive,
        "paragon": paragon,
        "passed": verdict.passed,
        "when": now(),
        "who": who(),
        "registry": reg.uri,
        "contract": {"path": str(contract_path), "sha256": contract_digest(contract_path)},
        "data_fingerprint": data_fp,
        "bootstrap": {"resamples": resamples, "seed": seed},
        "criteria": [r.__dict__ for r in verdict.results],
        "matrix": verdict.matrix,
        "interval": verdict.intervals,
        "gain": verdict.gain,
        "dry_run": dry_run,
    }
    if psi_info is not None:
        report["upgrade"] = psi_info
    blob = json.dumps(report, sort_keys=True, indent=2).encode()
    report["report_sha256"] = hashlib.sha256(blob).hexdigest()
    outcome = Outcome(report=report, verdict=verdict, exit_code=0 if verdict.passed else 1)
    if dry_run:
        return outcome

    _record(reg, rec, verdict, report, blob)
    if not verdict.passed:
        return outcome

    outcome.moved = _move_production(reg, rec, against, report, outcome.messages)
    return outcome


def _move_production(
    reg: Registry,
    rec: VersionRecord,
    against: str | None,
    report: dict[str, Any],
    messages: list[str],
) -> bool:
    """Compare-and-set of the production alias under the lock, logged before and after."""
    root = reg.root
    log = PromotionLog(root)
    with promotion_lock(root):
        log.reconcile(reg.production)
        current = reg.production()
        if current == rec.name:
            messages.append(f"{rec.name} is already production; nothing to move")
            moved = False
        elif current is not None and against is None:
            raise UsageError(f"production is {current!r}: name it with --against {current}")
        elif current is not None and current != against:
            raise PromotionConflict(
                f"production is {current!r}, not {against!r}: another promotion moved it; "
                f"re-run the gate against {current!r}"
            )
        else:
            pid = log.begin(
                **{"from": current, "to": rec.name, "against": against},
                contract_sha256=report["contract"]["sha256"],
                report_sha256=report["report_sha256"],
                registry=reg.uri,
                mlflow_version=rec.mlflow_version,
            )
            reg.set_production(rec)
            log.finish(pid)
            moved = True
    reg.set_tags(rec, {"compat.status": "promoted"})
    return moved


def _promote_root(
    reg: Registry, rec: VersionRecord, contract_path: Path, against: str | None, dry_run: bool
) -> Outcome:
    """A version without a parent has no criteria: it may only open an empty production alias."""
    current = reg.production()
    if current not in (None, rec.name):
        raise BadInputError(
            f"{contract_path}: parent: {rec.name} has no parent, so it can only become production "
            f"while production is unset (it is {current!r})"
        )
    verdict = Verdict(version=rec.name, parent=None, passed=True)
    report: dict[str, Any] = {
        "version": rec.name,
        "against": against,
        "parent": None,
        "transitive": [],
        "paragon": None,
        "passed": True,
        "when": now(),
        "who": who(),
        "registry": reg.uri,
        "contract": {"path": str(contract_path), "sha256": contract_digest(contract_path)},
        "criteria": [],
        "matrix": {},
        "interval": {},
        "gain": {},
        "dry_run": dry_run,
    }
    blob = json.dumps(report, sort_keys=True, indent=2).encode()
    report["report_sha256"] = hashlib.sha256(blob).hexdigest()
    outcome = Outcome(report=report, verdict=verdict)
    if not dry_run:
        _record(reg, rec, verdict, report, blob)
        outcome.moved = _move_production(reg, rec, against, report, outcome.messages)
    return outcome


def _record(
    reg: Registry, rec: VersionRecord, verdict: Verdict, report: dict[str, Any], blob: bytes
) -> None:
    """Tags, description and the JSON report artifact on the registered version."""
    tags = {
        "compat.status": "passed" if verdict.passed else "failed",
        "compat.verdict.at": report["when"],
    }
    for r in verdict.results:
        # A forward criterion (M(new, psi(parent))) gets its own key beside the backward one.
        forward = ("forward",) if "forward" in r.require.split(" > ") else ()
        key = tag_key("compat.check", r.gallery, r.protocol, r.metric, *forward)
        tags[key] = (
            f"{'pass' if r.passed else 'fail'} {r.difference:+.4f}"
            if r.difference is not None
            else "fail n/a"
        )
    for p, per in verdict.gain.items():
        values = [g["value"] for g in per.values() if g.get("value") is not None]
        if values:
            tags[f"compat.gain.{p}"] = f"{values[0]:.4f}"
    reg.set_tags(rec, tags)
    reg.set_description(rec, _describe(verdict, report.get("against")))
    if rec.run_id:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"promote-{report['when'].replace(':', '').replace('.', '')}.json"
            path.write_bytes(blob)
            reg.call("log_artifact", rec.run_id, str(path), "reports")
