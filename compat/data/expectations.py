"""Data expectations on a split, run with Great Expectations inside the ``split`` stage.

An ephemeral GX context (no files written, no network) validates pandas frames built from the
manifests. Two kinds of expectation:

- scenario-independent ones, on every training set and the held-out sets (the evaluation set
  and, where the split has one, the validation set): evaluation and validation classes never in
  training, validation classes never in evaluation, evaluation items never in training, every
  referenced item present in the source, unique items, labels among the declared classes and
  every declared class with an item, and each held-out set's query/gallery/pair invariants;
- the scenarios' own, generated from the relations each scenario declares
  (``compat.data.scenarios.Relation``), one translation per relation kind.

A violation raises ``DataValidationError`` whose message lists each failed expectation as
``[frame] description: N unexpected, e.g. [...]``; an expectation that cannot run is a bug in
compat and raises ``RuntimeError`` instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from compat.data.scenarios import (
    ClassCount,
    ClassPrefix,
    Disjoint,
    Equal,
    ItemsPerClass,
    Relation,
    Replay,
    Share,
    Subset,
    Unit,
)
from compat.data.sources import Source
from compat.data.split import EvalManifest, SplitParams, TrainManifest
from compat.errors import BadInputError


class DataValidationError(BadInputError):
    """A split broke one or more data expectations (exit code 4)."""


@dataclass
class Check:
    """One expectation on one frame, with the words a person reads when it fails.

    ``frame`` is the name shown; ``key`` the frame's key where the shown names could collide
    (a training set may be called ``eval-pairs``)."""

    frame: str
    description: str
    expectation: Any
    key: str = ""

    def __post_init__(self) -> None:
        self.key = self.key or self.frame


@dataclass
class Failure:
    frame: str
    description: str
    unexpected: int | None
    examples: list[Any]
    observed: Any = None

    def line(self) -> str:
        count = (
            f"{self.unexpected} unexpected"
            if self.unexpected is not None
            else f"observed {self.observed}"
        )
        ex = f", e.g. {self.examples[:3]}" if self.examples else ""
        return f"[{self.frame}] {self.description}: {count}{ex}"


def _offending(values: Any, forbidden: Any, keep_if_in: bool) -> Any:
    """A column holding each value that breaks a set relation, and None where it holds.

    GX copies an expectation's value_set many times while planning metrics (tens of seconds for a
    20,000-item set), so set relations are evaluated with pandas ``isin`` into this column and GX
    checks that it is null; the failure report then lists the offending items themselves.
    """
    hit = values.isin(forbidden)
    bad = hit if keep_if_in else ~hit
    return values.where(bad, None)


@dataclass
class _Split:
    """The frames being built, and what the relation translations read from the split.

    Each training set has an item frame (one row per item) and a class frame (one row per class,
    in class order); a relation's offending values become a column of the frame it is checked on.
    """

    frames: dict[str, Any]
    manifests: dict[str, TrainManifest]
    pool_classes: int  # the training pool's class count
    source_items: Counter[str]  # class -> its item count in the source (the pool holds them all)
    E: Any  # great_expectations.expectations

    def check(self, name: str, unit: Unit, description: str, expectation: Any) -> Check:
        """A check on training set ``name``'s item frame or class frame."""
        if unit == "items":
            return Check(name, description, expectation, key=f"items:{name}")
        return Check(f"{name} classes", description, expectation, key=f"classes:{name}")

    def null(self, name: str, unit: Unit, values: Any, description: str) -> Check:
        """Add ``values`` (None where the relation holds) as a column of a frame of ``name`` and
        expect it to be null: the failure report then lists the offending values themselves."""
        frame = self.frames[f"{unit}:{name}"]
        column = f"relation_{len(frame.columns)}"
        frame[column] = list(values)
        return self.check(name, unit, description, self.E.ExpectColumnValuesToBeNull(column=column))

    def members(self, name: str, unit: Unit) -> list[str]:
        m = self.manifests[name]
        return m.classes if unit == "classes" else m.items

    def set_relation(self, a: str, b: str, unit: Unit, keep_if_in: bool, description: str) -> Check:
        """Values of ``a`` that are (``keep_if_in``) or are not members of ``b`` offend."""
        column = self.frames[f"{unit}:{a}"]["class" if unit == "classes" else "item"]
        values = _offending(column, self.members(b, unit), keep_if_in)
        return self.null(a, unit, values, description)

    def per_class(self, name: str, want: dict[str, int], description: str) -> Check:
        """Each class of ``name`` holds exactly ``want[class]`` of its items."""
        have = Counter(self.manifests[name].labels)
        values = [
            None
            if have[c] == want[c]
            else f"{c}: {have[c]} of {self.source_items[c]}, expected {want[c]}"
            for c in self.manifests[name].classes
        ]
        return self.null(name, "classes", values, description)


# One translation per relation kind: the checks that all pass exactly when the relation holds.


def _disjoint(r: Disjoint, s: _Split) -> list[Check]:
    what = f"no item shared with {r.b}" if r.unit == "items" else f"classes disjoint from {r.b}'s"
    return [s.set_relation(r.a, r.b, r.unit, True, f"{what} ({r.why})")]


def _subset(r: Subset, s: _Split) -> list[Check]:
    return [s.set_relation(r.a, r.b, r.unit, False, f"{r.unit} a subset of {r.b}'s ({r.why})")]


def _equal(r: Equal, s: _Split) -> list[Check]:
    return [
        s.set_relation(r.a, r.b, r.unit, False, f"same {r.unit} as {r.b} ({r.why})"),
        s.set_relation(r.b, r.a, r.unit, False, f"same {r.unit} as {r.a} ({r.why})"),
    ]


def _class_prefix(r: ClassPrefix, s: _Split) -> list[Check]:
    a, b = s.manifests[r.a].classes, s.manifests[r.b].classes
    values = [None if k < len(b) and b[k] == c else f"{c} at {k}" for k, c in enumerate(a)]
    return [s.null(r.a, "classes", values, f"class order a prefix of {r.b}'s ({r.why})")]


def _class_count(r: ClassCount, s: _Split) -> list[Check]:
    if isinstance(r.count, Share):
        n = r.count.of(s.pool_classes)
        description = f"{n} classes: {r.count} of the pool's {s.pool_classes} ({r.why})"
    else:
        n, description = r.count, f"{r.count} classes ({r.why})"
    return [s.check(r.a, "classes", description, s.E.ExpectTableRowCountToEqual(value=n))]


def _items_per_class(r: ItemsPerClass, s: _Split) -> list[Check]:
    want = {c: r.share.of(s.source_items[c]) for c in s.manifests[r.a].classes}
    return [s.per_class(r.a, want, f"{r.share} of each class's items ({r.why})")]


def _replay(r: Replay, s: _Split) -> list[Check]:
    m, earlier = s.manifests[r.a], s.manifests[r.earlier]
    old = set(earlier.classes)
    n = s.source_items
    want = {c: min(r.memory, n[c]) if c in old else n[c] for c in m.classes}
    # Replayed images come from the memory the previous task kept, not from elsewhere in the pool.
    kept = set(earlier.items)
    foreign = [
        i if c in old and i not in kept else None for i, c in zip(m.items, m.labels, strict=False)
    ]
    return [
        s.per_class(
            r.a,
            want,
            f"replays {r.memory} items of each of {r.earlier}'s classes, all of a new one ({r.why})",
        ),
        s.null(r.a, "items", foreign, f"replayed items are {r.earlier}'s ({r.why})"),
    ]


_TRANSLATIONS: dict[type[Relation], Callable[[Any, _Split], list[Check]]] = {
    Disjoint: _disjoint,
    Subset: _subset,
    Equal: _equal,
    ClassPrefix: _class_prefix,
    ClassCount: _class_count,
    ItemsPerClass: _items_per_class,
    Replay: _replay,
}


def relation_checks(relation: Relation, split: _Split) -> list[Check]:
    """The GX checks of one declared relation."""
    return _TRANSLATIONS[type(relation)](relation, split)


def _frames_and_checks(
    source: Source,
    params: SplitParams,
    manifests: dict[str, TrainManifest],
    ev: EvalManifest,
    validation: EvalManifest | None = None,
) -> tuple[dict[str, Any], list[Check]]:
    """The frames to validate and the expectations a split must meet, from its scenarios."""
    import great_expectations as gx
    import pandas as pd

    E = gx.expectations
    eval_classes = pd.Series(sorted(set(ev.labels)))
    eval_items = pd.Series(ev.items)

    def present(ids: list[str]) -> list[bool]:
        if source.in_memory:
            return [i in source for i in ids]
        return [i in source and source.path_of(i).is_file() for i in ids]

    source_items = Counter(item.label for item in source.items)
    # The pool build_split draws from: every non-evaluation, non-validation class, up to
    # train_classes.
    n = len(source_items)
    held = params.eval.class_count(n) + (
        params.validation.class_count(n) if params.validation else 0
    )
    pool_classes = len(source_items) - held
    if params.train_classes is not None:
        pool_classes = min(pool_classes, params.train_classes)
    split = _Split({}, manifests, pool_classes, source_items, E)
    frames = split.frames
    checks: list[Check] = []
    for name, m in manifests.items():
        df = pd.DataFrame({"item": m.items, "label": m.labels, "exists": present(m.items)})
        df["eval_class"] = _offending(df["label"], eval_classes, keep_if_in=True)
        df["eval_item"] = _offending(df["item"], eval_items, keep_if_in=True)
        df["undeclared_class"] = _offending(df["label"], m.classes, keep_if_in=False)
        frames[f"items:{name}"] = df
        frames[f"classes:{name}"] = pd.DataFrame({"class": pd.Series(m.classes, dtype=object)})
        n_cls = len(m.classes)
        checks += [
            split.check(name, "items", d, e)
            for d, e in [
                ("items are unique", E.ExpectColumnValuesToBeUnique(column="item")),
                (
                    "every item exists in the source",
                    E.ExpectColumnValuesToBeInSet(column="exists", value_set=[True]),
                ),
                (
                    "no evaluation class in training",
                    E.ExpectColumnValuesToBeNull(column="eval_class"),
                ),
                (
                    "no evaluation item in training",
                    E.ExpectColumnValuesToBeNull(column="eval_item"),
                ),
                (
                    "labels are declared classes",
                    E.ExpectColumnValuesToBeNull(column="undeclared_class"),
                ),
                ("at least one item", E.ExpectTableRowCountToBeBetween(min_value=1)),
                (
                    "every declared class has an item",
                    E.ExpectColumnUniqueValueCountToBeBetween(
                        column="label", min_value=n_cls, max_value=n_cls
                    ),
                ),
            ]
        ]

    for sc in params.scenarios:
        for relation in sc.relations():
            checks += relation_checks(relation, split)

    for held_name, held in (("eval", ev), *([("validation", validation)] if validation else [])):
        held_frames, held_checks = _held_out_checks(held_name, held, present, E)
        frames.update(held_frames)
        checks += held_checks
    if validation is not None:
        # Validation classes are disjoint from training and from the evaluation set, as the
        # evaluation classes are from training (compat.data.split.build_validation).
        val_classes = pd.Series(sorted(set(validation.labels)))
        for name in manifests:
            df = frames[f"items:{name}"]
            df["validation_class"] = _offending(df["label"], val_classes, keep_if_in=True)
            checks.append(
                split.check(
                    name,
                    "items",
                    "no validation class in training",
                    E.ExpectColumnValuesToBeNull(column="validation_class"),
                )
            )
        frames["held:validation"]["eval_class"] = _offending(
            frames["held:validation"]["label"], eval_classes, keep_if_in=True
        )
        checks.append(
            Check(
                "validation",
                "no evaluation class in validation",
                E.ExpectColumnValuesToBeNull(column="eval_class"),
                key="held:validation",
            )
        )
    return frames, checks


def _held_out_checks(
    name: str, ev: EvalManifest, present: Callable[[list[str]], list[bool]], E: Any
) -> tuple[dict[str, Any], list[Check]]:
    """The frames and expectations of one held-out set (the evaluation set, or the validation
    set built like it): unique items present in the source, each a query or a gallery item,
    every mated class in the gallery and no non-mated one, every mated query with a positive,
    and unique, label-consistent, balanced verification pairs."""
    import pandas as pd

    frames: dict[str, Any] = {}
    roles = ["other"] * len(ev.items)
    for i in ev.query:
        roles[i] = "query"
    for i in ev.gallery:
        roles[i] = "gallery" if roles[i] == "other" else "both"
    frames[f"held:{name}"] = pd.DataFrame(
        {"item": ev.items, "label": ev.labels, "role": roles, "exists": present(ev.items)}
    )
    nonmated = set(ev.nonmated_classes)
    gallery_labels = sorted({ev.labels[i] for i in ev.gallery})
    mated_query = pd.Series(
        [ev.labels[i] for i in ev.query if ev.labels[i] not in nonmated], dtype=object
    )
    frames[f"held:{name}-query"] = pd.DataFrame(
        {"no_positive": _offending(mated_query, gallery_labels, keep_if_in=False)}
    )
    gallery = pd.Series([ev.labels[i] for i in ev.gallery], dtype=object)
    frames[f"held:{name}-gallery"] = pd.DataFrame(
        {"label": gallery, "nonmated": _offending(gallery, ev.nonmated_classes, keep_if_in=True)}
    )
    frames[f"held:{name}-pairs"] = pd.DataFrame(
        {
            "pair": [f"{a}-{b}" for a, b, _ in ev.pairs],
            "same": [bool(x) for *_, x in ev.pairs],
            "agrees": [(ev.labels[a] == ev.labels[b]) == x for a, b, x in ev.pairs],
        }
    )
    mated = len(set(ev.labels)) - len(nonmated)

    def held(part: str, description: str, expectation: Any) -> Check:
        return Check(f"{name}{part}", description, expectation, key=f"held:{name}{part}")

    checks = [
        held("", "items are unique", E.ExpectColumnValuesToBeUnique(column="item")),
        held(
            "",
            "every item exists in the source",
            E.ExpectColumnValuesToBeInSet(column="exists", value_set=[True]),
        ),
        held(
            "",
            "each item is a query or a gallery item, not both",
            E.ExpectColumnValuesToBeInSet(column="role", value_set=["query", "gallery"]),
        ),
        held(
            "-gallery",
            "every mated class has a gallery item",
            E.ExpectColumnUniqueValueCountToBeBetween(
                column="label", min_value=mated, max_value=mated
            ),
        ),
        held(
            "-gallery",
            "no gallery item of a non-mated class",
            E.ExpectColumnValuesToBeNull(column="nonmated"),
        ),
        held(
            "-query",
            "every mated query has a positive in the gallery",
            E.ExpectColumnValuesToBeNull(column="no_positive"),
        ),
        held("-pairs", "pairs are unique", E.ExpectColumnValuesToBeUnique(column="pair")),
        held(
            "-pairs",
            "pair flags agree with labels",
            E.ExpectColumnValuesToBeInSet(column="agrees", value_set=[True]),
        ),
        held(
            "-pairs",
            "pairs are balanced (40-60% same-class)",
            E.ExpectColumnMeanToBeBetween(column="same", min_value=0.4, max_value=0.6),
        ),
    ]
    return frames, checks


def _config_key(config: Any) -> tuple:
    """What identifies an expectation within a suite's results (GX merges equal ones)."""
    kwargs = sorted((k, repr(v)) for k, v in config.kwargs.items() if k != "batch_id")
    return config.type, tuple(kwargs)


def _exception(info: dict | None) -> str | None:
    """The message of an expectation that could not run, or None. A suite's results nest the
    exception info by metric; a single expectation's is flat."""
    info = info or {}
    for one in [info] if "raised_exception" in info else info.values():
        if isinstance(one, dict) and one.get("raised_exception"):
            return str(one.get("exception_message"))
    return None


def run_checks(frames: dict[str, Any], checks: list[Check]) -> list[Failure]:
    """Validate every check on its frame in an ephemeral GX context; return the failures."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    ds = ctx.data_sources.add_pandas("compat")
    by_frame: dict[str, list[Check]] = {}
    for check in checks:
        by_frame.setdefault(check.key, []).append(check)
    results = {}
    for n, (key, group) in enumerate(by_frame.items()):
        asset = ds.add_dataframe_asset(name=f"frame-{n}")
        bd = asset.add_batch_definition_whole_dataframe("all")
        batch = bd.get_batch(batch_parameters={"dataframe": frames[key]})
        # One suite per frame: GX plans the metrics of its expectations together, several times
        # faster than validating them one by one.
        suite = gx.ExpectationSuite(name=f"frame-{n}")
        for check in group:
            suite.add_expectation(check.expectation)
        res = batch.validate(
            suite, result_format={"result_format": "SUMMARY", "partial_unexpected_count": 3}
        )
        for r in res.results:
            results[key, _config_key(r.expectation_config)] = r
    failures = []
    for check in checks:
        res = results[check.key, _config_key(check.expectation.configuration)]
        message = _exception(res.exception_info)
        if message is not None:
            # An expectation that could not run is a bug in compat, not a data failure.
            raise RuntimeError(
                f"expectation {check.description!r} on {check.frame} could not run: {message}"
            )
        if not res.success:
            r = res.result or {}
            failures.append(
                Failure(
                    check.frame,
                    check.description,
                    r.get("unexpected_count"),
                    list(r.get("partial_unexpected_list") or []),
                    r.get("observed_value"),
                )
            )
    return failures


def validate_split(
    source: Source,
    params: SplitParams,
    manifests: dict[str, TrainManifest],
    ev: EvalManifest,
    validation: EvalManifest | None = None,
) -> None:
    """Raise DataValidationError listing every failed expectation of this split (the
    validation set's too, when the split has one)."""
    failures = run_checks(*_frames_and_checks(source, params, manifests, ev, validation))
    if failures:
        lines = "\n  ".join(f.line() for f in failures)
        raise DataValidationError(f"split failed {len(failures)} data expectation(s):\n  {lines}")
