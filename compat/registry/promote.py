"""``compat promote <version> --against <version>``: gate a version on its contract, then move
the ``production`` alias with a compare-and-set.

Order of work: load the contract and the registered versions (parent, transitive ancestors,
paragon); check the contract's declared facts against the registered ones; decide whether the
move is a rollback; assemble every needed embedding of the evaluation set and psi(parent)
(:mod:`compat.registry.assemble`); judge every criterion; record the verdict, matrix,
intervals and update gain on the version (:mod:`compat.registry.record`); then, only if
everything passed, under the promotion lock: resolve any promotion a crash left pending, check
that ``production`` still points at ``--against``, log ``pending``, move the alias, log
``committed``.

**Rollbacks** (:mod:`compat.registry.rollback`). Promoting a version while production
(``--against``) is not one of its ancestors (a newer version, or an unrelated one) rolls
production back: the gallery may hold rows that production embedded, which the version's own
contract never measured. It needs ``--rollback`` (without it: exit 6 naming both versions; with
it on an ordinary promotion: exit 2), and is gated on the version's contract *and* on its
rollback criteria against every version whose rows it must serve: by default M(version, S)
against M(version, version) for production S and every version served since. Losses it
accepts are named; ``accept_loss`` accepts the failed rollback checks as measured, recorded
in the log with who and why. It is logged, reported and recorded as a rollback.

**Dry runs** judge and report exactly as the real run, then stop before anything is written,
with the exit code the real run would have had: 1 for a failed check, 6 when production is not
at ``--against`` any more. ``local`` names versions read from the working tree instead of the
registry (:mod:`compat.registry.overlay`): a pull request's candidate, gated without being
registered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.contracts.gate import DeclaredFacts, Verdict, check_facts, judge
from compat.contracts.schema import Contract, contract_digest, load_contract
from compat.errors import BadInputError, ConflictError, NotFoundError, UsageError
from compat.registry import recovery
from compat.registry.assemble import Paths, assemble
from compat.registry.drift import drift
from compat.registry.gallery import GalleryGate, tag_gallery
from compat.registry.promotions import now, who
from compat.registry.record import record_verdict, seal
from compat.registry.rollback import (
    accept_losses,
    accepted_losses,
    loss_hints,
    rollback_galleries,
    rolls_back,
    served_since,
)
from compat.registry.store import Registry, VersionRecord, check_version_name
from compat.registry.uris import mask

# ``--against none``: the caller expects production to be unset (the first promotion).
NO_VERSION = "none"


class PromotionConflict(ConflictError):
    """``production`` moved away from ``--against`` before this promotion could move it."""


@dataclass
class Outcome:
    report: dict[str, Any]
    verdict: Verdict
    moved: bool = False
    would_move: bool = False  # a dry run: the real run would move production
    exit_code: int = 0
    messages: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # drift: printed on stderr by the CLI


def ancestors(reg: Registry, version: str) -> list[str]:
    """``version``'s registered parent, its parent, ... (stops at an unregistered name)."""
    out: list[str] = []
    rec = reg.find(version)
    while rec is not None and rec.parent and rec.parent not in out and rec.parent != version:
        out.append(rec.parent)
        rec = reg.find(rec.parent)
    return out


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


def registered_facts(rec: VersionRecord) -> DeclaredFacts:
    """What the registry says about a version that its contract also declares (from its tags)."""
    try:
        dim = int(rec.tags.get("compat.dim", "-1"))
    except ValueError:
        raise BadInputError(
            f"{rec.name}: tag compat.dim: {rec.tags.get('compat.dim')!r} is not an integer"
        ) from None
    return DeclaredFacts(
        parent=rec.tags.get("compat.parent") or None,
        dim=dim,
        head=rec.tags.get("compat.head") or None,
    )


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
    rollback: bool = False,
    accept_loss: str | None = None,
    local: list[str] | tuple[str, ...] = (),
    embeddings: dict[str, Path] | None = None,
    gallery: GalleryGate | None = None,
) -> Outcome:
    """Gate ``version`` on its contract and, if it passes, make it ``production``.

    ``against`` is the version production must point at when the alias moves (compare-and-set);
    None (or ``"none"``) means production must still be unset: the first promotion.
    ``rollback``: the caller says this is a rollback (see the module docstring); required
    exactly when it is one. ``accept_loss``: why the team accepts the failed rollback checks
    as measured (a rollback only; logged with who). ``local`` (a dry run only): versions read
    from ``paths.models/<v>/``, or from the bundle ``embeddings[v]``, instead of the registry.
    ``gallery``: the LanceDB table the version will serve, its rows checked against what the
    gate measures and recorded with the move (:mod:`compat.registry.gallery`).
    """
    expect_unset = against is not None and against.lower() == NO_VERSION
    if expect_unset:
        against = None
    check_version_name(version)
    if against is not None:
        check_version_name(against)
    if accept_loss is not None and not rollback:
        raise UsageError("--accept-loss: accepts the losses of a rollback; pass --rollback too")
    if accept_loss is not None and not accept_loss.strip():
        raise UsageError("--accept-loss: say why the loss is accepted (it is logged)")
    paths = paths or Paths()
    if local:
        if not dry_run:
            raise UsageError("--local: versions read from files are gated in a dry run only")
        from compat.registry.overlay import Overlay

        reg = Overlay(reg, local, paths.models, paths.contracts, embeddings or {})
    contract_path = paths.contracts / f"{version}.yaml"
    contract: Contract = load_contract(contract_path)
    paragon = paragon or contract.paragon or params_paragon(paths.params, version)
    rec = reg.get(version)
    check_facts(contract, registered_facts(rec), f"{contract_path}")
    if against is not None and reg.find(against) is None:
        raise NotFoundError(f"--against {against!r} is not registered")
    is_rollback = rolls_back(ancestors(reg, version), version, against)
    if is_rollback and not rollback:
        raise ConflictError(
            f"promoting {version} while production is {against!r} is a rollback ({against} is "
            f"not an ancestor of {version}): pass --rollback to gate it as one (it is then also "
            f"checked on {against}'s rows)"
        )
    if rollback and not is_rollback:
        why = "production is unset" if against is None else f"{against} is {version}'s ancestor"
        raise UsageError(f"--rollback: promoting {version} is not a rollback ({why})")
    served: list[str] = []
    if is_rollback:
        assert against is not None
        served = rollback_galleries(contract, against, reg.ledger().promotions(), contract_path)
        if not served or not contract.rollback_criteria():
            what = "no rows" if not served else f"{', '.join(served)}'s rows with no criterion"
            raise BadInputError(
                f"{contract_path}: rollback.criteria: a rollback to {version} would check "
                f"{what}: list a criterion without forward in criteria or rollback.criteria"
            )
    if gallery is not None:  # the rows the table holds: each version's measured by this gate
        gallery.check(contract, reg, served, contract_path, rollback=is_rollback)
    if not is_rollback and contract.parent is None:
        return _promote_root(reg, rec, contract_path, against, dry_run, expect_unset, gallery)
    gains_from = paragon if contract.parent else None
    names = [version, *([contract.parent] if contract.parent else []), *contract.transitive]
    names += served + ([gains_from] if gains_from else [])
    records = {n: reg.get(n) for n in dict.fromkeys(names)}

    facts = assemble(reg, contract, records, paths, gains_from)
    if gallery is not None:  # its mapped rows moved by the map the gate measures
        gallery.check_map(facts.psi, contract, contract_path)
    verdict = judge(
        contract,
        facts.manifest,
        facts.embeddings,
        paragon=gains_from,
        resamples=resamples,
        seed=seed,
        upgraded=facts.upgraded,
        adapted=facts.adapted,
        rollback=served,
        lineage=ancestors(reg, version),
    )
    if facts.serve is not None:
        verdict.serve = facts.serve
    accepted = accept_losses(verdict, accept_loss) if accept_loss is not None else None
    report = _report(reg, verdict, contract_path, against, dry_run)
    report["kind"] = "rollback" if is_rollback else "promotion"
    if is_rollback:
        report["rollback"] = {"from": against, "serve": served, "accepted_loss": accepted}
    if local:
        report["local"] = sorted(set(local))
    report.update(
        transitive=contract.transitive,
        paragon=paragon,
        data_fingerprint=facts.data_fingerprint,
        bootstrap={"resamples": resamples, "seed": seed},
        criteria=[r.__dict__ for r in verdict.results],
        matrix=verdict.matrix,
        interval=verdict.intervals,
        gain=verdict.gain,
    )
    if facts.psi is not None:
        report["upgrade"] = facts.psi
    report["serve"] = verdict.serve
    if gallery is not None:
        report["gallery"] = gallery.summary()
    blob = seal(report)
    outcome = Outcome(report=report, verdict=verdict, exit_code=0 if verdict.passed else 1)
    outcome.messages += accepted_losses(verdict, contract_path, accepted)
    outcome.messages += loss_hints(contract, contract_path, verdict)
    if dry_run:
        outcome.warnings += _drift_now(reg)
        if verdict.passed:  # where the real run would stop: production moved meanwhile
            already = _plan_move(reg.production(), rec.name, against, expect_unset)
            outcome.messages += already
            outcome.would_move = not already
        return outcome

    record_verdict(
        reg, rec, verdict, report, blob,
        evaluation=facts.manifest, evaluation_where=str(paths.eval_manifest),
        keep_status=was_production(reg, rec),
    )  # fmt: skip
    if verdict.passed:
        outcome.moved = _move_production(
            reg, rec, against, report, outcome, expect_unset, "rollback" if is_rollback else None,
            accepted,
        )  # fmt: skip
    else:
        outcome.warnings += _drift_now(reg)
    return outcome


def was_production(reg: Registry, rec: VersionRecord) -> bool:
    """Whether ``rec`` is or was production: its status says so, or the promotion log holds a
    committed move to it. Its status then stays ``promoted`` whatever a later gate says (a failed
    re-gate or rollback never rewrites the history of a version that served)."""
    if rec.status == "promoted":
        return True
    return any(
        p.get("state") == "committed" and p.get("to") == rec.name for p in reg.ledger().promotions()
    )


def _drift_now(reg: Registry) -> list[str]:
    """The drift warning, read without the lock (a dry run or a failed gate moves nothing)."""
    message = drift(reg.production(), reg.ledger().promotions())
    return [message] if message else []


def _report(
    reg: Registry, verdict: Verdict, contract_path: Path, against: str | None, dry_run: bool
) -> dict[str, Any]:
    """The report fields every promotion has (a root version's criteria etc. stay empty)."""
    return {
        "version": verdict.version,
        "against": against,
        "parent": verdict.parent,
        "transitive": [],
        "paragon": None,
        "passed": verdict.passed,
        "when": now(),
        "who": who(),
        "registry": mask(reg.uri),
        "contract": {"path": str(contract_path), "sha256": contract_digest(contract_path)},
        "criteria": [],
        "matrix": {},
        "interval": {},
        "gain": {},
        "dry_run": dry_run,
    }


def _move_production(
    reg: Registry,
    rec: VersionRecord,
    against: str | None,
    report: dict[str, Any],
    outcome: Outcome,
    expect_unset: bool = False,
    kind: str | None = None,
    accepted: dict[str, Any] | None = None,
) -> bool:
    """Compare-and-set of the production alias under the lock, logged before and after.

    ``against``: the version production must point at now; None: production must be unset
    (``expect_unset``: the caller said so with ``--against none``; else it named no version,
    which is a usage error while production is set)."""
    messages = outcome.messages
    log = reg.ledger()
    with log.lock():
        # what an earlier, killed promotion left (compat.registry.recovery): fixed first
        messages += recovery.repair(reg, log)
        current = reg.production()
        drifted = drift(current, log.promotions())
        if drifted:
            outcome.warnings.append(drifted)
        already = _plan_move(current, rec.name, against, expect_unset)
        if already:
            messages += already
            moved = False
        else:
            # the gated table version tagged first: a logged promotion never lacks its rows
            gallery = report.get("gallery")
            tagged = {"gallery": tag_gallery(gallery, rec.name)} if gallery else {}
            pid = log.begin(
                **{"from": current, "to": rec.name, "against": against},
                **({"kind": kind} if kind else {}),
                **({"accepted_loss": accepted} if accepted else {}),
                **tagged,
                contract_sha256=report["contract"]["sha256"],
                report_sha256=report["report_sha256"],
                registry=mask(reg.uri),
                mlflow_version=rec.mlflow_version,
            )
            # If the move fails (the server died), the pending record stays: the next
            # promotion resolves it against the alias, so nothing is logged half-done.
            reg.set_production(rec)
            log.finish(pid)
            moved = True
    reg.set_tags(rec, {"compat.status": "promoted"})
    return moved


def _plan_move(
    current: str | None, version: str, against: str | None, expect_unset: bool
) -> list[str]:
    """Whether the alias may move from ``current`` to ``version`` (compare-and-set on
    ``against``): [] when it may, a message when it already points there; UsageError (exit 2)
    when production is set and no ``--against`` names it, PromotionConflict (exit 6) when it
    is not at ``--against``. A dry run asks it too, so it exits as the real run would."""
    if current == version:
        return [f"{version} is already production; nothing to move"]
    if current is not None and against is None and not expect_unset:
        raise UsageError(f"production is {current!r}: name it with --against {current}")
    if current != against:
        # Compare-and-set: the alias moves only from the version the gate compared against.
        where = "unset" if current is None else repr(current)
        hint = (
            "promote the first version with --against none"
            if current is None
            else f"re-run the gate against {current!r}"
        )
        expected = "unset" if against is None else repr(against)
        raise PromotionConflict(
            f"production is {where}, not {expected}: it moves only from the version the gate "
            f"compared against; {hint}"
        )
    return []


def _promote_root(
    reg: Registry,
    rec: VersionRecord,
    contract_path: Path,
    against: str | None,
    dry_run: bool,
    expect_unset: bool = False,
    gallery: GalleryGate | None = None,
) -> Outcome:
    """A version without a parent has no criteria: it may only open an empty production alias."""
    current = reg.production()
    if current not in (None, rec.name):
        raise BadInputError(
            f"{contract_path}: parent: {rec.name} has no parent, so it can only become production "
            f"while production is unset (it is {current!r})"
        )
    verdict = Verdict(version=rec.name, parent=None, passed=True)
    report = _report(reg, verdict, contract_path, against, dry_run)
    if gallery is not None:
        report["gallery"] = gallery.summary()
    blob = seal(report)
    outcome = Outcome(report=report, verdict=verdict)
    if dry_run:
        outcome.warnings += _drift_now(reg)
        already = _plan_move(current, rec.name, against, expect_unset)
        outcome.messages += already
        outcome.would_move = not already
    else:
        record_verdict(reg, rec, verdict, report, blob, keep_status=was_production(reg, rec))
        outcome.moved = _move_production(reg, rec, against, report, outcome, expect_unset)
    return outcome


__all__ = [
    "Outcome",
    "Paths",
    "PromotionConflict",
    "ancestors",
    "params_paragon",
    "promote",
    "rollback_galleries",
    "rolls_back",
    "served_since",
    "was_production",
]
