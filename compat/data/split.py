"""The ``split`` stage's work: training manifests per version and the held-out evaluation set.

Evaluation classes are drawn first and never enter any training set (open-set evaluation, as in
every paper compat follows). Each evaluation class is divided into query and gallery items (every
gallery class has an item; every mated query has a positive in the gallery); a fraction of the
evaluation classes put all their items in the query set: their queries are the non-mated probes of
the open-set protocol. Verification pairs are balanced (half same class, half different).

An optional validation set (``validation:``, built like the evaluation set and written as
``splits/validation.json``) holds classes disjoint from both the evaluation set and every training
set: choices such as a method's weight are made on it, so the evaluation set is looked at once
(:mod:`compat.evaluate.pick`). The evaluation classes do not change when it is added; the
training pool gives up the validation classes.

Manifests are JSON with sorted keys and carry fingerprints, so the same seed gives the same bytes.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from compat.config import validation_problems
from compat.data.scenarios import Chain, Scenario
from compat.data.sources import Source
from compat.errors import BadInputError, NotFoundError
from compat.files import read_regular_bytes
from compat.io import fingerprint, write_json

VALIDATION = "validation"  # splits/validation.json
MAX_PAIRS = 10_000_000
AUTO_PAIRS = 6000


class EvalSplit(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    classes: int | float = Field(
        1000,
        description="classes held out: a number (at least 2), or a share of the source's classes "
        "in (0, 1) that scales with the source (0.5: half of them)",
    )
    query_fraction: float = Field(
        0.5, gt=0.0, lt=1.0, description="share of a class's items in the query set"
    )
    open_set_fraction: float = Field(
        0.1, ge=0.0, lt=1.0, description="share of evaluation classes with no gallery item"
    )
    # At most 10M pairs: each is held in memory by the split and scored by every cell.
    pairs: int | Literal["auto"] = Field(
        6000,
        description="verification pairs, half of them same-class; auto: 6,000, or as many as "
        "the held-out items allow when they allow fewer",
    )

    @field_validator("classes")
    @classmethod
    def _classes(cls, v: int | float) -> int | float:
        if isinstance(v, float) and not v.is_integer():
            if not 0 < v < 1:
                raise ValueError("a share of the classes must lie in (0, 1)")
            return v
        if v < 2:
            raise ValueError("at least 2 classes (or a share in (0, 1))")
        return int(v)

    @field_validator("pairs")
    @classmethod
    def _pair_count(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 2 <= v <= MAX_PAIRS:
            raise ValueError(f"between 2 and {MAX_PAIRS:,} pairs (or auto)")
        return v

    def class_count(self, n_classes: int) -> int:
        """How many classes this set holds out of a source of ``n_classes``."""
        if isinstance(self.classes, float):
            return max(2, round(self.classes * n_classes))
        return self.classes


class SplitParams(BaseModel):
    """The ``split:`` section of params.yaml."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    seed: int = Field(0, ge=0, le=2**32 - 1, description="random seed (0 .. 2**32 - 1)")
    train_classes: int | None = Field(
        None,
        ge=1,
        le=10_000_000,
        description="cap on the training pool; default: every non-evaluation class",
    )
    eval: EvalSplit = EvalSplit()
    validation: EvalSplit | None = Field(
        None,
        description="classes held out for choices (a method's weight), disjoint from training "
        "and evaluation; written as splits/validation.json",
    )
    scenarios: list[Scenario] = Field(default_factory=lambda: [Chain(kind="chain")])

    @model_validator(mode="after")
    def _unique_names(self) -> SplitParams:
        names = [n for s in self.scenarios for n in s.names()]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"training set names used twice across scenarios: {dup}")
        for reserved in ("eval", VALIDATION):
            if reserved in names:
                raise ValueError(f"{reserved!r} is reserved for a held-out set")
        return self


class TrainManifest(BaseModel):
    """One version's training set. ``classes`` is the head's class order (index = class id)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    name: str
    scenario: str
    fingerprint: str
    source_fingerprint: str
    classes: list[str]
    items: list[str]
    labels: list[str]

    def targets(self) -> list[int]:
        index = {c: i for i, c in enumerate(self.classes)}
        return [index[label] for label in self.labels]


class EvalManifest(BaseModel):
    """The held-out evaluation set; ``query``, ``gallery`` and ``pairs`` index into ``items``."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    fingerprint: str
    source_fingerprint: str
    items: list[str]
    labels: list[str]
    query: list[int]
    gallery: list[int]
    nonmated_classes: list[str]
    pairs: list[tuple[int, int, bool]]


def _fingerprinted(cls: type[BaseModel], body: dict) -> BaseModel:
    return cls(**body, fingerprint=fingerprint(body))


def _class_items(source: Source) -> dict[str, list[str]]:
    by_class: dict[str, list[str]] = defaultdict(list)
    for item in source.items:
        by_class[item.label].append(item.id)
    return by_class


def _eval_set(
    by_class: dict[str, list[str]],
    classes: list[str],
    p: EvalSplit,
    rng: np.random.Generator,
    source_fp: str,
    field: str = "split.eval",
) -> EvalManifest:
    n_open = round(len(classes) * p.open_set_fraction)
    open_cls = set(classes[:n_open])
    items: list[str] = []
    labels: list[str] = []
    query: list[int] = []
    gallery: list[int] = []
    for c in sorted(classes):
        ids = sorted(by_class[c])
        ids = [ids[i] for i in rng.permutation(len(ids))]
        if c in open_cls:
            n_query = len(ids)
        elif len(ids) == 1:
            n_query = 0  # a single image can only serve as a gallery item
        else:
            n_query = min(len(ids) - 1, max(1, round(len(ids) * p.query_fraction)))
        for k, item in enumerate(ids):
            (query if k < n_query else gallery).append(len(items))
            items.append(item)
            labels.append(c)
    pairs = _pairs(labels, p.pairs, rng, f"{field}.pairs")  # "auto": as many as fit
    body = {
        "source_fingerprint": source_fp,
        "items": items,
        "labels": labels,
        "query": query,
        "gallery": gallery,
        "nonmated_classes": sorted(open_cls),
        "pairs": pairs,
    }
    return _fingerprinted(EvalManifest, body)  # type: ignore[return-value]


def _pairs(
    labels: list[str], count: int | str, rng: np.random.Generator, field: str = "split.eval.pairs"
) -> list[tuple[int, int, bool]]:
    """Balanced verification pairs, distinct, sampled with a seeded RNG; ``count`` must fit in
    the distinct pairs the items allow (else BadInputError naming ``field``)."""
    by_class: dict[str, list[int]] = defaultdict(list)
    for i, c in enumerate(labels):
        by_class[c].append(i)
    multi = [v for v in by_class.values() if len(v) >= 2]
    n_pos_max = sum(len(v) * (len(v) - 1) // 2 for v in multi)
    if count == "auto":
        n_neg_max = (len(labels) * (len(labels) - 1) // 2 - n_pos_max) // 2
        count = min(AUTO_PAIRS, 2 * min(n_pos_max, n_neg_max)) if multi else AUTO_PAIRS
    assert isinstance(count, int)
    n_pos = min(count // 2, n_pos_max)
    n_neg = count - n_pos
    if not multi or len(by_class) < 2:
        raise BadInputError(
            f"{field}: verification pairs need a class with 2 items and at least 2 classes"
        )
    n_all = len(labels) * (len(labels) - 1) // 2
    # Sampling by rejection: asking for (nearly) every distinct pair would draw without end.
    limit = (n_all - n_pos_max) // 2 + n_pos
    if n_neg > (n_all - n_pos_max) // 2:
        raise BadInputError(
            f"{field}: {count} pairs are more than {limit} the {len(labels)} evaluation items "
            f"allow ({n_pos} same-class, at most half of the {n_all - n_pos_max} different-class "
            "pairs); lower it or hold out more classes"
        )
    out: set[tuple[int, int, bool]] = set()
    n = len(labels)
    tries = 0
    while len(out) < n_pos and tries < 50 * count:
        tries += 1
        members = multi[rng.integers(len(multi))]
        a, b = rng.choice(len(members), size=2, replace=False)
        i, j = sorted((members[a], members[b]))
        out.add((int(i), int(j), True))
    while len(out) < n_pos + n_neg and tries < 100 * count:
        tries += 1
        i, j = sorted(int(x) for x in rng.integers(n, size=2))
        if labels[i] != labels[j]:
            out.add((i, j, False))
    return sorted(out)


def _class_order(
    by_class: dict[str, list[str]], params: SplitParams
) -> tuple[list[str], list[str], list[str]]:
    """(evaluation, validation, training pool) classes: one seeded order, cut in that order."""
    rng = np.random.default_rng([params.seed, 0x5E])
    names = sorted(by_class)
    order = [names[i] for i in rng.permutation(len(names))]
    n_eval = params.eval.class_count(len(order))
    n_val = params.validation.class_count(len(order)) if params.validation is not None else 0
    if len(order) < n_eval + n_val + 2:
        # One message naming every key to change, with sizes that fit this source.
        keys = [f"split.eval.classes ({params.eval.classes} -> {n_eval})"]
        if n_val:
            keys.append(f"split.validation.classes ({params.validation.classes} -> {n_val})")  # type: ignore[union-attr]
        room = len(order) - 2
        raise BadInputError(
            f"{' and '.join(keys)}: {n_eval + n_val} held-out classes leave fewer than 2 "
            f"training classes (the source has {len(order)}); hold out at most {room} in all, "
            "e.g. split.eval.classes: 0.5 (a share of the source's classes)"
        )
    return order[:n_eval], order[n_eval : n_eval + n_val], order[n_eval + n_val :]


def build_validation(source: Source, params: SplitParams) -> EvalManifest | None:
    """The validation manifest (None without ``params.validation``): classes disjoint from the
    evaluation set and from every training set, split into query, gallery and pairs like it."""
    if params.validation is None:
        return None
    _, val_cls, _ = _class_order(_class_items(source), params)
    return _eval_set(
        _class_items(source),
        val_cls,
        params.validation,
        np.random.default_rng([params.seed, 0x7A1]),
        source.fingerprint,
        "split.validation",
    )


def build_split(
    source: Source, params: SplitParams
) -> tuple[dict[str, TrainManifest], EvalManifest]:
    """Every training manifest and the evaluation manifest, deterministic for ``params.seed``
    (the validation manifest: :func:`build_validation`)."""
    by_class = _class_items(source)
    eval_cls, _, pool_cls = _class_order(by_class, params)
    if params.train_classes is not None:
        pool_cls = pool_cls[: params.train_classes]
    eval_manifest = _eval_set(
        by_class,
        eval_cls,
        params.eval,
        np.random.default_rng([params.seed, 0xE7]),
        source.fingerprint,
    )

    item_rng = np.random.default_rng([params.seed, 0x17])
    pool = {}
    for c in pool_cls:
        ids = sorted(by_class[c])
        pool[c] = [ids[i] for i in item_rng.permutation(len(ids))]
    label_of = {it.id: it.label for it in source.items}
    manifests: dict[str, TrainManifest] = {}
    for scenario in params.scenarios:
        try:
            sets = scenario.assign(pool)
        except ValueError as err:
            raise BadInputError(f"split.scenarios ({scenario.kind}): {err}") from None
        for name, (ids, classes) in sets.items():
            rank = {c: k for k, c in enumerate(classes)}
            ids = sorted(ids, key=lambda i: (rank[label_of[i]], i))
            body = {
                "name": name,
                "scenario": scenario.kind,
                "source_fingerprint": source.fingerprint,
                "classes": classes,
                "items": ids,
                "labels": [label_of[i] for i in ids],
            }
            manifests[name] = _fingerprinted(TrainManifest, body)  # type: ignore[assignment]
    return manifests, eval_manifest


def write_split(
    out_dir: str | os.PathLike[str],
    manifests: dict[str, TrainManifest],
    eval_manifest: EvalManifest,
    validation: EvalManifest | None = None,
) -> None:
    out = Path(out_dir)
    for name, m in manifests.items():
        write_json(out / f"{name}.json", m.model_dump(), indent=None)
    write_json(out / "eval.json", eval_manifest.model_dump(), indent=None)
    if validation is not None:
        write_json(out / f"{VALIDATION}.json", validation.model_dump(), indent=None)


def _load(cls: type[BaseModel], path: str | os.PathLike[str]) -> BaseModel:
    path = Path(path)
    if not path.exists():
        raise NotFoundError(
            f"{path}: manifest not found; run the split stage first (dvc repro split)"
        )
    try:
        return cls.model_validate(json.loads(read_regular_bytes(path, "a JSON manifest")))
    except json.JSONDecodeError as err:
        raise BadInputError(f"{path}: not JSON ({err})") from None
    except ValidationError as err:
        raise BadInputError(validation_problems(path, err)[0]) from None


def load_train_manifest(path: str | os.PathLike[str]) -> TrainManifest:
    return _load(TrainManifest, path)  # type: ignore[return-value]


def load_eval_manifest(path: str | os.PathLike[str] = "splits/eval.json") -> EvalManifest:
    return _load(EvalManifest, path)  # type: ignore[return-value]
