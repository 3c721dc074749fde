"""The compatibility contract a version declares in ``contracts/<version>.yaml``.

A contract names the parent the version must stay compatible with, the facts its model card must
show (embedding dimension, head), the criteria ``compat promote`` checks, the ancestors whose
galleries are still served (``transitive``: every criterion must hold against each of them too),
and optionally the paragon its update gain is measured against (an independent model trained on
the version's own training split; ``compat promote`` refuses one trained on other data) and,
for a version whose embedding width differs from an ancestor's, ``dim_mismatch``: how its
embeddings meet that ancestor's gallery (``truncate``: BCT's first d_old coordinates of the new
embedding, then L2-normalised; ``pad``: the old rows zero-padded; :mod:`compat.embeddings.dims`).

A criterion compares two cells of the compatibility matrix, M(query version, gallery version)
(BCT, Shen et al. CVPR 2020, Eq. 2: M(new, old) > M(old, old)). The terms of ``require`` are:

- ``cross``: M(new, parent): new queries against the parent's gallery (backward compatibility);
- ``self_parent``: M(parent, parent): what the service has today;
- ``self``: M(new, new): after a full backfill;
- ``forward``: M(new, psi(parent)): new queries against the parent's gallery upgraded by the
  version's upgrade module psi (BiCT's forward step, ``models/<version>/upgrade/``), e.g.
  ``require: forward > cross`` (the upgrade beats keeping the stored rows). psi maps the
  parent's embeddings only, so a criterion that uses ``forward`` is checked against the parent,
  not against the ``transitive`` ancestors.

``require: cross > self_parent`` with ``margin: m`` holds when M(new, parent) - M(parent, parent) > m.
With ``confidence: c`` the lower bound of a one-sided bootstrap interval at level c of that
difference must exceed m. The comparison is strict: a new version identical to its parent fails.

Names come from the catalogs: a criterion's ``protocol`` from the protocol catalog
(:data:`compat.evaluate.protocols.PROTOCOLS`), the ``head`` from the heads catalog
(:data:`compat.models.heads.HEADS`, read without importing torch). A criterion's ``metric``
must be one its protocol can compute; the gate then builds each protocol with the options that
cover every metric the contract asks for (``tar@far=0.0001`` adds that FAR, ``top20`` adds
k = 20, ``mAP@50`` sets map_k = 50), so an impossible metric fails here, before anything is
embedded.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from compat.config import DuplicateKeyError, load_yaml_text, validation_problems
from compat.errors import BadInputError, NotFoundError
from compat.evaluate.metrics import canonical_metric
from compat.evaluate.protocols import PROTOCOLS, options_for
from compat.files import read_regular_bytes
from compat.names import Name

TERMS: tuple[str, ...] = ("cross", "self_parent", "self", "forward")
_REQUIRE_RE = re.compile(r"^\s*(\w+)\s*>\s*(\w+)\s*$")
_HEADS_MODULE = Path(__file__).resolve().parents[1] / "models" / "heads.py"


def head_names() -> list[str]:
    """The heads catalog's names (:data:`compat.models.heads.HEADS`).

    Importing the catalog imports torch (seconds), which ``compat contract validate`` must not
    pay: unless the module is already loaded, the names are read from its
    ``@HEADS.register("...")`` decorators, so the catalog stays the one source of head names.
    """
    module = sys.modules.get("compat.models.heads")
    if module is not None:
        return module.HEADS.names()
    return _registered_heads(_HEADS_MODULE.read_text(encoding="utf-8"))


@functools.cache
def _registered_heads(source: str) -> list[str]:
    """Names registered by ``@HEADS.register("<name>")`` in the heads module's source."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "register"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "HEADS"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.append(str(node.args[0].value))
    return sorted(names)


def protocol_options(criteria: Iterable[Criterion]) -> dict[str, dict[str, Any]]:
    """Per protocol (sorted), the options under which it reports every metric ``criteria``
    ask for (:meth:`compat.evaluate.protocols.Protocol.options_for`); ValueError otherwise."""
    metrics: dict[str, list[str]] = {}
    for c in criteria:
        metrics.setdefault(c.protocol, []).append(c.metric)
    return {p: options_for(p, metrics[p]) for p in sorted(metrics)}


class Criterion(BaseModel):
    """One required inequality between two matrix cells, for one protocol and metric."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    protocol: str
    metric: str
    require: str = "cross > self_parent"
    margin: float = Field(0.0, ge=-1.0, le=1.0)
    confidence: float | None = Field(None, gt=0.5, lt=1.0)

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, v: str) -> str:
        if v not in PROTOCOLS:
            raise ValueError(f"unknown protocol {v!r}; known: {', '.join(PROTOCOLS.names())}")
        return v

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str, info: ValidationInfo) -> str:
        metric = canonical_metric(v)
        protocol = info.data.get("protocol")  # absent when the protocol itself is invalid
        if protocol is not None:
            options_for(protocol, [metric])  # ValueError: the protocol cannot compute it
        return metric

    @field_validator("require")
    @classmethod
    def _require(cls, v: str) -> str:
        m = _REQUIRE_RE.match(v)
        if not m or m.group(1) not in TERMS or m.group(2) not in TERMS or m.group(1) == m.group(2):
            raise ValueError(
                f"require {v!r}: expected '<term> > <term>' with two different terms of {list(TERMS)}"
            )
        return f"{m.group(1)} > {m.group(2)}"

    @property
    def terms(self) -> tuple[str, str]:
        lhs, rhs = self.require.split(" > ")
        return lhs, rhs

    @property
    def uses_forward(self) -> bool:
        """Whether the criterion needs the parent's gallery upgraded by psi."""
        return "forward" in self.terms

    def describe(self, new: str, parent: str, serve: str = "native") -> str:
        """The criterion in words, with the cells of the ``serve`` configuration (``cross`` is
        M(adapt(new), parent) for a query adapter, M(new, psi(parent)) for a backfill)."""
        cross = {
            "native": f"M({new}, {parent})",
            "query-adapter": f"M({adapter_name(new)}, {parent})",
            "query-blend": f"M({adapter_name(new, serve)}, {parent})",
            "backfill": f"M({new}, psi({parent}))",
        }[serve]
        cells = {
            "cross": cross,
            "self_parent": f"M({parent}, {parent})",
            "self": f"M({new}, {new})",
            "forward": f"M({new}, psi({parent}))",
        }
        lhs, rhs = self.terms
        margin = f" + {self.margin:g}" if self.margin else ""
        conf = f" at {self.confidence:.0%} confidence" if self.confidence else ""
        return f"{self.protocol} {self.metric}: {cells[lhs]} > {cells[rhs]}{margin}{conf}"


class RollbackCriterion(Criterion):
    """A criterion a rollback is judged on, for each served version S in the parent's place.

    Its ``require`` defaults to ``cross > self``: M(V, S) against M(V, V), what the
    rolled-back version V delivers on the rows S embedded against what it delivered on its own
    rows (the forward-compatibility direction: old queries on a newer model's gallery, BCT,
    Shen et al. CVPR 2020, Sec. 3, read for the change of query model a rollback makes).
    ``cross > self_parent`` (M(V, S) against M(S, S), what S's rows serve today) may be asked
    for explicitly. A negative ``margin`` is a loss the team accepts on S's rows."""

    require: str = "cross > self"


class Rollback(BaseModel):
    """What a rollback *to* this version must still serve (``compat promote --rollback``).

    A version promoted while production is a newer or unrelated version rolls production back;
    the gallery may then hold rows that versions after it embedded. ``serve`` names those
    versions (default: the production version at the time, and every version the promotion log
    put in production after this one last served; production must be among them, else the
    gate refuses the rollback); each criterion is checked with the served version S in the
    parent's place: ``cross`` = M(this, S) (its queries mapped by its query adapter or blend
    when the contract serves through one), ``self_parent`` = M(S, S), ``self`` = M(this, this).
    ``criteria`` default to ``cross > self`` at margin 0 for each metric of the contract's own
    criteria (those without ``forward``: psi maps the parent's rows only). A negative
    ``margin`` is a loss the team accepts on those rows, and is named in the gate's output.
    An empty ``serve`` or ``criteria`` would check no rows and is refused.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    serve: list[Name] | None = None
    criteria: list[RollbackCriterion] | None = None

    @field_validator("serve")
    @classmethod
    def _serve(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and not v:
            raise ValueError(
                "an empty list checks no rows: omit serve (production and every version served "
                "since this one last was) or list the versions whose rows the gallery holds"
            )
        if v is not None and len(set(v)) != len(v):
            raise ValueError("a version is listed twice")
        return v

    @field_validator("criteria")
    @classmethod
    def _criteria(cls, v: list[RollbackCriterion] | None) -> list[RollbackCriterion] | None:
        if v is not None and not v:
            raise ValueError(
                "an empty list checks no rows: omit criteria (cross > self on each of the "
                "contract's metrics) or list at least one"
            )
        for i, c in enumerate(v or []):
            if c.uses_forward:
                raise ValueError(
                    f"{i}: require {c.require!r}: a rollback has no psi of the served rows; use "
                    "cross, self_parent and self"
                )
        return v


def adapter_name(version: str, mode: str = "query-adapter") -> str:
    """The matrix row of ``version``'s queries mapped by its query adapter: ``adapt(v3)``; for
    a query blend (``mode`` ``query-blend``), ``blend(v3)``."""
    return f"{'blend' if mode == 'query-blend' else 'adapt'}({version})"


SERVE_MODES = ("native", "query-adapter", "query-blend", "backfill")


class Serve(BaseModel):
    """How the version is served against its parent's stored gallery (issue 27).

    ``native``: its own embeddings search the parent's rows (BCT's setting). ``query-adapter``:
    its queries are first mapped into the parent's space by a fitted map (Drift-Adapter,
    Vejendla, EMNLP 2025), so ``cross`` is M(adapt(new), parent). ``query-blend``: each query
    is embedded by the version and by the parent, and the adapted query and the parent's own
    are interpolated on the sphere with the weight the map's card holds (SLERP, Ricci et al.
    NeurIPS 2026; :mod:`compat.maps.blend`), so ``cross`` is M(blend(new), parent): two forward
    passes per query. ``backfill``: the parent's
    rows are mapped into the new space by a gallery map (BiCT's psi), so ``cross`` is
    M(new, psi(parent)). ``map`` is the map's folder; default ``maps/<version>-to-<parent>``
    for a query adapter, ``maps/<version>-to-<parent>-blend`` for a query blend and
    ``models/<version>/upgrade`` (the pipeline's psi) for a backfill.
    A map reads one space and writes one other, so a non-native configuration serves the
    parent's gallery only: ``transitive`` ancestors are refused with it.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    mode: Literal["native", "query-adapter", "query-blend", "backfill"] = "native"
    map: str | None = None

    @model_validator(mode="after")
    def _map_needs_a_mode(self) -> Serve:
        if self.mode == "native" and self.map is not None:
            raise ValueError(
                f"map {self.map!r}: a native version is served without a map, so it would be "
                "ignored; name the mode it serves (query-adapter, query-blend or backfill) or drop "
                "map"
            )
        return self

    def map_folder(
        self, version: str, parent: str, models: str | os.PathLike[str] = "models"
    ) -> str | None:
        """The map's folder (None for ``native``)."""
        if self.mode == "native":
            return None
        if self.map is not None:
            return self.map
        if self.mode == "query-adapter":
            return f"maps/{version}-to-{parent}"
        if self.mode == "query-blend":
            return f"maps/{version}-to-{parent}-blend"
        return str(Path(models) / version / "upgrade")


class Contract(BaseModel):
    """What a version promises; validated with ``extra="forbid"`` so a typo is an error."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    version: Name
    parent: Name | None = None
    embedding_dim: int = Field(gt=0, le=65536)
    head: str
    criteria: list[Criterion] = Field(default_factory=list)
    transitive: list[Name] = Field(default_factory=list)
    paragon: Name | None = None
    dim_mismatch: Literal["truncate", "pad"] | None = None
    rollback: Rollback | None = None
    serve: Serve = Field(default_factory=Serve)

    @field_validator("serve", mode="before")
    @classmethod
    def _serve_shorthand(cls, v: Any) -> Any:
        return {"mode": v} if isinstance(v, str) else v

    @field_validator("head")
    @classmethod
    def _head(cls, v: str) -> str:
        known = head_names()
        if v not in known:
            raise ValueError(f"unknown head {v!r}; known: {', '.join(known)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Contract:
        if self.parent is None and (self.criteria or self.transitive):
            raise ValueError("criteria and transitive need a parent")
        if self.parent is not None and not self.criteria:
            raise ValueError("a version with a parent must declare at least one criterion")
        if self.parent == self.version or self.version in self.transitive:
            raise ValueError("a version cannot be its own parent or ancestor")
        if self.parent in self.transitive:
            raise ValueError(f"transitive: {self.parent} is the parent; list only older ancestors")
        if len(set(self.transitive)) != len(self.transitive):
            raise ValueError("transitive: an ancestor is listed twice")
        if self.serve.mode != "native":
            if self.parent is None:
                raise ValueError(f"serve: {self.serve.mode} needs a parent whose gallery it serves")
            if self.transitive:
                raise ValueError(
                    f"serve: {self.serve.mode}: a map serves the parent's gallery only; list no "
                    "transitive ancestors (or serve native)"
                )
        if self.rollback is not None and self.version in (self.rollback.serve or []):
            raise ValueError("rollback.serve: a version cannot serve a rollback to itself")
        return self

    def rollback_criteria(self) -> list[Criterion]:
        """The criteria a rollback to this version is checked on, per served version: the
        contract's ``rollback.criteria``, else :func:`default_rollback_criteria`."""
        if self.rollback is not None and self.rollback.criteria is not None:
            return list(self.rollback.criteria)
        return default_rollback_criteria(self.criteria)

    def rollback_key(self, index: int) -> str:
        """The contract key a rollback criterion comes from: ``rollback.criteria.<i>``, or
        ``rollback.criteria`` (unwritten: the default) when the contract declares none."""
        if self.rollback is not None and self.rollback.criteria is not None:
            return f"rollback.criteria.{index}"
        return "rollback.criteria"


def default_rollback_criteria(criteria: Iterable[Criterion]) -> list[Criterion]:
    """A rollback's default criteria: ``cross > self`` at margin 0, no confidence bound, once
    for each (protocol, metric) of ``criteria`` without ``forward``: the rolled-back version
    on the served rows must do at least as well as on its own (every loss accepted is written
    down: a margin in ``rollback.criteria``, or ``compat promote --accept-loss``)."""
    seen: dict[tuple[str, str], Criterion] = {}
    for c in criteria:
        if not c.uses_forward:
            seen.setdefault(
                (c.protocol, c.metric), RollbackCriterion(protocol=c.protocol, metric=c.metric)
            )
    return list(seen.values())


def contract_digest(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_contract(path: str | os.PathLike[str]) -> tuple[Contract | None, list[str]]:
    """Parse and validate a contract file; return it (or None) and every problem found."""
    import yaml
    from pydantic import ValidationError

    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"{path}: contract not found")
    data = read_regular_bytes(path, "a YAML contract")
    try:
        raw = load_yaml_text(data.decode("utf-8"))
    except DuplicateKeyError as err:
        return None, [f"{path}: {err.key}: {err}"]
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        return None, [f"{path}: line {line}: not valid UTF-8"]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "(root)"
        return None, [f"{path}: {where}: not valid YAML"]
    if not isinstance(raw, dict):
        return None, [f"{path}: (root): expected a mapping"]
    try:
        contract = Contract.model_validate(raw)
    except ValidationError as err:
        return None, validation_problems(path, err, raw)
    problems = [
        f"{path}: {field}.metric: {reason}" for field, reason in _joint_metric_problems(contract)
    ]
    problems += [f"{path}: {field}: {reason}" for field, reason in _rollback_problems(contract)]
    if path.stem != contract.version:
        problems.append(
            f"{path}: version: {contract.version!r} does not match the file name {path.stem!r}"
        )
    return (contract if not problems else None), problems


def _joint_metric_problems(contract: Contract) -> list[tuple[str, str]]:
    """Metrics each valid alone that one protocol cannot compute together (mAP@50 and
    mAP@100: identification truncates its ranking at one k); (field, reason). The rollback's
    criteria are judged with the contract's in one run, so they count together."""
    named = [(f"criteria.{i}", c) for i, c in enumerate(contract.criteria)]
    if contract.rollback is not None:
        named += [
            (f"rollback.criteria.{i}", c) for i, c in enumerate(contract.rollback.criteria or [])
        ]
    problems = []
    for i, (field, c) in enumerate(named):
        earlier = [d.metric for _, d in named[: i + 1] if d.protocol == c.protocol]
        try:
            options_for(c.protocol, earlier)
        except ValueError as err:
            problems.append((field, str(err)))
    return problems


def _rollback_problems(contract: Contract) -> list[tuple[str, str]]:
    """A ``rollback.serve`` that lists the parent or a transitive ancestor: their rows are the
    contract's own criteria's, so listed there they check no rollback rows; (field, reason)."""
    served = contract.rollback.serve if contract.rollback is not None else None
    covered = [v for v in served or [] if v == contract.parent or v in contract.transitive]
    if not covered:
        return []
    return [
        (
            "rollback.serve",
            f"{', '.join(covered)}: checked by the contract's own criteria already (parent, "
            "transitive); list the versions served after this one",
        )
    ]


def load_contract(path: str | os.PathLike[str]) -> Contract:
    """Load a contract or raise BadInputError naming the file and the first problem."""
    contract, problems = check_contract(path)
    if contract is None:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BadInputError(problems[0] + more)
    return contract


__all__ = [
    "TERMS",
    "Contract",
    "Criterion",
    "Rollback",
    "RollbackCriterion",
    "canonical_metric",
    "check_contract",
    "contract_digest",
    "default_rollback_criteria",
    "head_names",
    "load_contract",
    "protocol_options",
]
