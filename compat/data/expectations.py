"""Data expectations on a split, run with Great Expectations inside the ``split`` stage.

An ephemeral GX context (no files written, no network) validates pandas frames built from the
manifests: evaluation classes disjoint from training classes, the scenario's class and item
relations, no item shared where the scenario forbids it, counts and class coverage, and every
referenced item present in the source. A violation raises ``DataValidationError`` whose message
lists each failed expectation with its unexpected count and a few examples.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from compat.data.sources import Source
from compat.data.split import EvalManifest, SplitParams, TrainManifest
from compat.errors import BadInputError


class DataValidationError(BadInputError):
    """A split broke one or more data expectations (exit code 4)."""


@dataclass
class Check:
    """One expectation on one frame, with the words a person reads when it fails."""

    frame: str
    description: str
    expectation: Any


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


def _frames_and_checks(
    source: Source, params: SplitParams, manifests: dict[str, TrainManifest], ev: EvalManifest
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

    frames: dict[str, Any] = {}
    checks: list[Check] = []
    for name, m in manifests.items():
        df = pd.DataFrame({"item": m.items, "label": m.labels, "exists": present(m.items)})
        df["eval_class"] = _offending(df["label"], eval_classes, keep_if_in=True)
        df["eval_item"] = _offending(df["item"], eval_items, keep_if_in=True)
        df["undeclared_class"] = _offending(df["label"], m.classes, keep_if_in=False)
        frames[name] = df
        n_cls = len(m.classes)
        checks += [
            Check(name, "items are unique", E.ExpectColumnValuesToBeUnique(column="item")),
            Check(
                name,
                "every item exists in the source",
                E.ExpectColumnValuesToBeInSet(column="exists", value_set=[True]),
            ),
            Check(
                name,
                "no evaluation class in training",
                E.ExpectColumnValuesToBeNull(column="eval_class"),
            ),
            Check(
                name,
                "no evaluation item in training",
                E.ExpectColumnValuesToBeNull(column="eval_item"),
            ),
            Check(
                name,
                "labels are declared classes",
                E.ExpectColumnValuesToBeNull(column="undeclared_class"),
            ),
            Check(name, "at least one item", E.ExpectTableRowCountToBeBetween(min_value=1)),
            Check(
                name,
                "every declared class has an item",
                E.ExpectColumnUniqueValueCountToBeBetween(
                    column="label", min_value=n_cls, max_value=n_cls
                ),
            ),
        ]

    def relation(
        frame: str, column: str, other: list[str], keep_if_in: bool, description: str
    ) -> None:
        key = f"{column}_{len(checks)}"
        frames[frame][key] = _offending(frames[frame][column], other, keep_if_in)
        checks.append(Check(frame, description, E.ExpectColumnValuesToBeNull(column=key)))

    for sc in params.scenarios:
        names = sc.names()
        if sc.kind == "chain":
            for parent, child in itertools.pairwise(names):
                relation(
                    parent,
                    "item",
                    manifests[child].items,
                    False,
                    f"items a subset of {child}'s (chain)",
                )
        elif sc.kind == "incremental":
            tasks = sc.task_names()
            for prev, cur in itertools.pairwise(tasks):
                relation(
                    prev,
                    "label",
                    manifests[cur].classes,
                    False,
                    f"classes kept by {cur} (incremental)",
                )
            for t in sc.cumulative:
                task = tasks[t - 1]
                relation(
                    f"{task}-all",
                    "label",
                    manifests[task].classes,
                    False,
                    f"classes seen by {task} (cumulative)",
                )
        else:
            old, new = names
            if sc.kind == "open-class":
                relation(
                    new,
                    "label",
                    manifests[old].classes,
                    True,
                    f"classes disjoint from {old}'s (open-class)",
                )
            elif sc.kind == "extended-class":
                relation(
                    old,
                    "label",
                    manifests[new].classes,
                    False,
                    f"classes a subset of {new}'s (extended-class)",
                )
            elif sc.kind == "open-data":
                relation(
                    new,
                    "item",
                    manifests[old].items,
                    True,
                    f"no item shared with {old} (open-data)",
                )
                relation(
                    new,
                    "label",
                    manifests[old].classes,
                    False,
                    f"same classes as {old} (open-data)",
                )
            else:  # extended-data, identical-data
                relation(
                    old,
                    "item",
                    manifests[new].items,
                    False,
                    f"items a subset of {new}'s ({sc.kind})",
                )

    roles = ["other"] * len(ev.items)
    for i in ev.query:
        roles[i] = "query"
    for i in ev.gallery:
        roles[i] = "gallery" if roles[i] == "other" else "both"
    frames["eval"] = pd.DataFrame(
        {"item": ev.items, "label": ev.labels, "role": roles, "exists": present(ev.items)}
    )
    nonmated = set(ev.nonmated_classes)
    gallery_labels = sorted({ev.labels[i] for i in ev.gallery})
    mated_query = pd.Series(
        [ev.labels[i] for i in ev.query if ev.labels[i] not in nonmated], dtype=object
    )
    frames["eval-query"] = pd.DataFrame(
        {"no_positive": _offending(mated_query, gallery_labels, keep_if_in=False)}
    )
    gallery = pd.Series([ev.labels[i] for i in ev.gallery], dtype=object)
    frames["eval-gallery"] = pd.DataFrame(
        {"label": gallery, "nonmated": _offending(gallery, ev.nonmated_classes, keep_if_in=True)}
    )
    frames["eval-pairs"] = pd.DataFrame(
        {
            "pair": [f"{a}-{b}" for a, b, _ in ev.pairs],
            "same": [bool(x) for *_, x in ev.pairs],
            "agrees": [(ev.labels[a] == ev.labels[b]) == x for a, b, x in ev.pairs],
        }
    )
    mated = len(set(ev.labels)) - len(nonmated)
    checks += [
        Check("eval", "items are unique", E.ExpectColumnValuesToBeUnique(column="item")),
        Check(
            "eval",
            "every item exists in the source",
            E.ExpectColumnValuesToBeInSet(column="exists", value_set=[True]),
        ),
        Check(
            "eval",
            "each item is a query or a gallery item, not both",
            E.ExpectColumnValuesToBeInSet(column="role", value_set=["query", "gallery"]),
        ),
        Check(
            "eval-gallery",
            "every mated class has a gallery item",
            E.ExpectColumnUniqueValueCountToBeBetween(
                column="label", min_value=mated, max_value=mated
            ),
        ),
        Check(
            "eval-gallery",
            "no gallery item of a non-mated class",
            E.ExpectColumnValuesToBeNull(column="nonmated"),
        ),
        Check(
            "eval-query",
            "every mated query has a positive in the gallery",
            E.ExpectColumnValuesToBeNull(column="no_positive"),
        ),
        Check("eval-pairs", "pairs are unique", E.ExpectColumnValuesToBeUnique(column="pair")),
        Check(
            "eval-pairs",
            "pair flags agree with labels",
            E.ExpectColumnValuesToBeInSet(column="agrees", value_set=[True]),
        ),
        Check(
            "eval-pairs",
            "pairs are balanced (40-60% same-class)",
            E.ExpectColumnMeanToBeBetween(column="same", min_value=0.4, max_value=0.6),
        ),
    ]
    return frames, checks


def run_checks(frames: dict[str, Any], checks: list[Check]) -> list[Failure]:
    """Validate every check on its frame in an ephemeral GX context; return the failures."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    ds = ctx.data_sources.add_pandas("compat")
    batches = {}
    failures = []
    for check in checks:
        if check.frame not in batches:
            asset = ds.add_dataframe_asset(name=check.frame)
            bd = asset.add_batch_definition_whole_dataframe("all")
            batches[check.frame] = bd.get_batch(batch_parameters={"dataframe": frames[check.frame]})
        res = batches[check.frame].validate(
            check.expectation,
            result_format={"result_format": "SUMMARY", "partial_unexpected_count": 3},
        )
        info = res.exception_info or {}
        if info.get("raised_exception"):
            # An expectation that could not run is a bug in compat, not a data failure.
            raise RuntimeError(
                f"expectation {check.description!r} on {check.frame} could not run: {info.get('exception_message')}"
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
    source: Source, params: SplitParams, manifests: dict[str, TrainManifest], ev: EvalManifest
) -> None:
    """Raise DataValidationError listing every failed expectation of this split."""
    failures = run_checks(*_frames_and_checks(source, params, manifests, ev))
    if failures:
        lines = "\n  ".join(f.line() for f in failures)
        raise DataValidationError(f"split failed {len(failures)} data expectation(s):\n  {lines}")
