"""The compatibility contract a version declares in ``contracts/<version>.yaml`` (DESIGN.md).

A contract names the parent the version must stay compatible with, the facts its model card must
show (embedding dimension, head), the criteria ``compat promote`` checks, the ancestors whose
galleries are still served (``transitive``: every criterion must hold against each of them too),
and optionally the paragon its update gain is measured against.

A criterion compares two cells of the compatibility matrix, M(query version, gallery version)
(BCT, Shen et al. CVPR 2020, Eq. 1: M(new, old) > M(old, old)). The terms of ``require`` are:

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
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from compat.config import validation_problems
from compat.errors import BadInputError, NotFoundError

TERMS: tuple[str, ...] = ("cross", "self_parent", "self", "forward")
PROTOCOLS = ("identification", "open-set", "verification")
_REQUIRE_RE = re.compile(r"^\s*(\w+)\s*>\s*(\w+)\s*$")
_METRIC_RE = re.compile(r"^(top\d+|mAP|mAP@\d+|tar@far=[^\s]+|tpir@fpir=[^\s]+)$")
_HEADS = ("softmax", "normface", "cosface", "arcface", "dsimplex")


def canonical_metric(name: str) -> str:
    """``tar@far=1e-3`` -> ``tar@far=0.001``: the spelling evaluation reports use."""
    if "=" in name:
        key, value = name.split("=", 1)
        try:
            number = float(value)
        except ValueError:
            raise ValueError(f"metric {name!r}: {value!r} is not a number") from None
        if not 0 < number < 1:
            raise ValueError(f"metric {name!r}: the rate must lie in (0, 1)")
        return f"{key}={number:g}" if number >= 1e-4 else f"{key}={number!r}"
    return name


class Criterion(BaseModel):
    """One required inequality between two matrix cells, for one protocol and metric."""

    model_config = ConfigDict(extra="forbid")

    protocol: Literal["identification", "open-set", "verification"]
    metric: str
    require: str = "cross > self_parent"
    margin: float = Field(0.0, ge=-1.0, le=1.0)
    confidence: float | None = Field(None, gt=0.5, lt=1.0)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v: str) -> str:
        if not _METRIC_RE.match(v):
            raise ValueError(
                f"unknown metric {v!r}; e.g. top1, top5, mAP, mAP@100, tar@far=0.001, tpir@fpir=0.01"
            )
        return canonical_metric(v)

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

    def describe(self, new: str, parent: str) -> str:
        cells = {
            "cross": f"M({new}, {parent})",
            "self_parent": f"M({parent}, {parent})",
            "self": f"M({new}, {new})",
            "forward": f"M({new}, psi({parent}))",
        }
        lhs, rhs = self.terms
        margin = f" + {self.margin:g}" if self.margin else ""
        conf = f" at {self.confidence:.0%} confidence" if self.confidence else ""
        return f"{self.protocol} {self.metric}: {cells[lhs]} > {cells[rhs]}{margin}{conf}"


class Contract(BaseModel):
    """What a version promises; validated with ``extra="forbid"`` so a typo is an error."""

    model_config = ConfigDict(extra="forbid")

    version: str = Field(min_length=1)
    parent: str | None = None
    embedding_dim: int = Field(gt=0)
    head: str
    criteria: list[Criterion] = Field(default_factory=list)
    transitive: list[str] = Field(default_factory=list)
    paragon: str | None = None

    @field_validator("head")
    @classmethod
    def _head(cls, v: str) -> str:
        if v not in _HEADS:
            raise ValueError(f"unknown head {v!r}; known: {', '.join(_HEADS)}")
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
        return self


def contract_digest(path: str | os.PathLike[str]) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_contract(path: str | os.PathLike[str]) -> tuple[Contract | None, list[str]]:
    """Parse and validate a contract file; return it (or None) and every problem found."""
    import yaml
    from pydantic import ValidationError

    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"{path}: contract not found")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
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
    problems = []
    if path.stem != contract.version:
        problems.append(
            f"{path}: version: {contract.version!r} does not match the file name {path.stem!r}"
        )
    return (contract if not problems else None), problems


def load_contract(path: str | os.PathLike[str]) -> Contract:
    """Load a contract or raise BadInputError naming the file and the first problem."""
    contract, problems = check_contract(path)
    if contract is None:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BadInputError(problems[0] + more)
    return contract


__all__ = [
    "PROTOCOLS",
    "TERMS",
    "Contract",
    "Criterion",
    "canonical_metric",
    "check_contract",
    "contract_digest",
    "load_contract",
]
