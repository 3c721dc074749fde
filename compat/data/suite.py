"""The split's expectation suite, generated from params.yaml's ``split`` section.

Every expectation reads the split's long frame (:mod:`compat.data.rows`) directly: GX selects the
rows it checks with a row condition (``set == "v1" and kind == "item"``) and, for a relation
between sets, the rows it compares them with through the expectations of
:mod:`compat.data.gx_custom`. Two kinds:

- scenario-independent ones: on all training sets at once, one expectation per rule (items
  unique within their set and present in the source, no evaluation item and no evaluation or
  validation class, labels among their set's declared classes, every declared class with an
  item, every set with items); on each held-out set (the evaluation set, and the validation set
  where the split has one), its query/gallery/pair invariants, and the validation set's classes
  never in evaluation;
- the scenarios' own, generated from the relations each scenario declares
  (:class:`compat.data.scenarios.Relation`), one translation per relation kind.

The suite depends on the params alone (set names, shares, counts), never on the data: what
depends on the source (the training pool's class count) is the suite parameter
``pool_classes``, given at validation. So the suite of a params file is written by the split
stage to ``gx/expectations/split.json`` and committed, and tests/data/test_expectation_outputs.py
regenerates every committed suite and compares.

Each expectation carries a ``description``, ``[subject] words`` (what Data Docs show and what a
failure says), and ``meta.subject``: ``training sets``, ``training classes``, a set (``v1``), a
set's class list (``v1 classes``) or a held-out set's part (``eval-pairs``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import great_expectations as gx
from great_expectations.expectations.row_conditions import Column

from compat.data import gx_custom as C
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
from compat.data.split import VALIDATION, SplitParams

E = gx.expectations
SUITE_NAME = "split"
POOL = "pool_classes"  # the suite parameter: the training pool's class count
NOTE = (
    "Generated from params.yaml's split section by compat.data.suite (the split stage writes "
    "it): change the scenarios or the code, not this file."
)


# ---- the rows an expectation reads -------------------------------------------------------------


def _kind(kind: str) -> Any:
    return Column("kind") == kind


def items(name: str) -> Any:
    """The items of set ``name`` (a training set, ``eval`` or ``validation``)."""
    return (Column("set") == name) & _kind("item")


def classes(name: str) -> Any:
    """The classes training set ``name`` declares, with their positions in its class order."""
    return (Column("set") == name) & _kind("class")


def source(on_disk: bool = False) -> Any:
    """The source's items (with ``on_disk``: those whose image is there)."""
    return _kind("source") & (Column("on_disk") == True) if on_disk else _kind("source")  # noqa: E712


def _roles(name: str, *roles: str) -> Any:
    return (Column("set") == name) & Column("role").is_in(list(roles))


def _pairs(name: str, same: bool | None = None) -> Any:
    rows = (Column("set") == name) & _kind("pair")
    return rows if same is None else rows & (Column("same") == same)


def _unit_rows(name: str, unit: Unit) -> Any:
    return items(name) if unit == "items" else classes(name)


def _column(unit: Unit) -> str:
    return "item" if unit == "items" else "label"


def _subject(name: str, unit: Unit) -> str:
    return name if unit == "items" else f"{name} classes"


def expect(subject: str, description: str, expectation: Any, relation: str = "") -> Any:
    """``expectation`` with the words a person reads, ``[subject] description``: Data Docs show
    them, and a failure starts with them."""
    expectation.description = f"[{subject}] {description}"
    expectation.meta = {"subject": subject, **({"relation": relation} if relation else {})}
    return expectation


# ---- one translation per relation kind: the expectations that all pass exactly when it holds --


def _in(a: str, b: str, unit: Unit, description: str, relation: str, negate: bool = False) -> Any:
    kind = C.ExpectColumnValuesToNotBeInRows if negate else C.ExpectColumnValuesToBeInRows
    check = kind(column=_column(unit), row_condition=_unit_rows(a, unit), rows=_unit_rows(b, unit))
    return expect(_subject(a, unit), description, check, relation)


def _disjoint(r: Disjoint) -> list[Any]:
    what = f"no item shared with {r.b}" if r.unit == "items" else f"classes disjoint from {r.b}'s"
    return [_in(r.a, r.b, r.unit, f"{what} ({r.why})", "disjoint", negate=True)]


def _subset(r: Subset) -> list[Any]:
    return [_in(r.a, r.b, r.unit, f"{r.unit} a subset of {r.b}'s ({r.why})", "subset")]


def _equal(r: Equal) -> list[Any]:
    return [
        _in(r.a, r.b, r.unit, f"same {r.unit} as {r.b} ({r.why})", "equal"),
        _in(r.b, r.a, r.unit, f"same {r.unit} as {r.a} ({r.why})", "equal"),
    ]


def _class_prefix(r: ClassPrefix) -> list[Any]:
    # Each class of a at the same position in b: a's order is a prefix of b's.
    check = C.ExpectColumnPairValuesToBeInRows(
        column_A="label", column_B="position", row_condition=classes(r.a), rows=classes(r.b)
    )
    return [expect(f"{r.a} classes", f"class order a prefix of {r.b}'s ({r.why})", check, "prefix")]


def _class_count(r: ClassCount) -> list[Any]:
    if isinstance(r.count, Share):
        check = C.ExpectTableRowCountToBeShare(
            share=r.count.model_dump(), of={"$PARAMETER": POOL}, row_condition=classes(r.a)
        )
        description = f"{r.count} of the pool's classes ({r.why})"
    else:
        check = E.ExpectTableRowCountToEqual(value=r.count, row_condition=classes(r.a))
        description = f"{r.count} classes ({r.why})"
    return [expect(f"{r.a} classes", description, check, "class count")]


def _per_class(
    a: str, share: Share, kept: str | None = None, kept_share: Share | None = None
) -> Any:
    """Each class of ``a`` holds ``share`` of its source items (``kept_share`` for the classes
    that set ``kept`` declares)."""
    return C.ExpectColumnValuesToBeShareOfRows(
        column="label",
        row_condition=classes(a),
        counted=items(a),
        of=source(),
        share=share.model_dump(),
        kept=classes(kept) if kept else None,
        kept_share=kept_share.model_dump() if kept_share else None,
    )


def _items_per_class(r: ItemsPerClass) -> list[Any]:
    description = f"{r.share} of each class's items ({r.why})"
    return [expect(f"{r.a} classes", description, _per_class(r.a, r.share), "items per class")]


def _replay(r: Replay) -> list[Any]:
    counts = _per_class(r.a, Share(), r.earlier, Share(most=r.memory))
    # Replayed images come from the memory the previous task kept, not from elsewhere in the pool.
    kept = C.ExpectColumnPairValuesToComeFromRows(
        column_A="item", column_B="label", row_condition=items(r.a), rows=items(r.earlier)
    )
    return [
        expect(
            f"{r.a} classes",
            f"replays {r.memory} items of each of {r.earlier}'s classes, all of a new one ({r.why})",
            counts,
            "replay",
        ),
        expect(r.a, f"replayed items are {r.earlier}'s ({r.why})", kept, "replay"),
    ]


_TRANSLATIONS: dict[type[Relation], Callable[[Any], list[Any]]] = {
    Disjoint: _disjoint,
    Subset: _subset,
    Equal: _equal,
    ClassPrefix: _class_prefix,
    ClassCount: _class_count,
    ItemsPerClass: _items_per_class,
    Replay: _replay,
}


def relation_expectations(relation: Relation) -> list[Any]:
    """The GX expectations of one declared relation."""
    return _TRANSLATIONS[type(relation)](relation)


# ---- the scenario-independent expectations -----------------------------------------------------


def _training_sets(names: list[str], held_out: list[str]) -> list[Any]:
    """Every training set, in one expectation per rule over all of them (GX plans each
    expectation at a cost, docs/findings.md; where a rule compares a set with itself, a failure
    shows the set in each offending row): items unique within their set and present in the source, never
    of a held-out class nor an evaluation item, labelled with their set's declared classes, each
    declared class with an item, every set with items."""
    rows, declared = (
        _kind("item") & (Column("role") == "train"),
        _kind("class") & (Column("role") == "class"),
    )
    subject = "training sets"
    out = [
        expect(
            subject,
            "items are unique within their set",
            E.ExpectCompoundColumnsToBeUnique(column_list=["set", "item"], row_condition=rows),
        ),
        expect(
            subject,
            "every set has items",
            E.ExpectColumnDistinctValuesToContainSet(
                column="set", value_set=names, row_condition=rows
            ),
        ),
        expect(
            subject,
            "every item exists in the source",
            C.ExpectColumnValuesToBeInRows(column="item", row_condition=rows, rows=source(True)),
        ),
        expect(
            subject,
            "no evaluation item in training",
            C.ExpectColumnValuesToNotBeInRows(
                column="item", row_condition=rows, rows=items("eval")
            ),
        ),
    ]
    for held, what in (("eval", "evaluation"), (VALIDATION, "validation")):
        if held in held_out:
            out.append(
                expect(
                    subject,
                    f"no {what} class in training",
                    C.ExpectColumnValuesToNotBeInRows(
                        column="label", row_condition=rows, rows=items(held)
                    ),
                )
            )
    return [
        *out,
        expect(
            subject,
            "labels are classes their set declares",
            C.ExpectColumnPairValuesToBeInRows(
                column_A="set", column_B="label", row_condition=rows, rows=declared
            ),
        ),
        expect(
            "training classes",
            "classes are unique within their set",
            E.ExpectCompoundColumnsToBeUnique(column_list=["set", "label"], row_condition=declared),
        ),
        expect(
            "training classes",
            "every declared class has an item in its set",
            C.ExpectColumnPairValuesToBeInRows(
                column_A="set", column_B="label", row_condition=declared, rows=rows
            ),
        ),
    ]


def _held_out_set(name: str) -> list[Any]:
    """A held-out set (the evaluation set, or the validation set built like it): unique items
    present in the source, each a query or a gallery item, every mated class in the gallery and
    no non-mated one, every mated query with a positive, and unique, label-consistent, balanced
    verification pairs."""
    rows = items(name)
    # A class is mated when it has a gallery item; otherwise it must be declared non-mated.
    served = _roles(name, "gallery", "both", "nonmated")
    gallery, queries = _roles(name, "gallery", "both"), _roles(name, "query", "both")
    pairs = _pairs(name)
    return [
        expect(
            name,
            "items are unique",
            E.ExpectColumnValuesToBeUnique(column="item", row_condition=rows),
        ),
        expect(
            name,
            "every item exists in the source",
            C.ExpectColumnValuesToBeInRows(column="item", row_condition=rows, rows=source(True)),
        ),
        expect(
            name,
            "each item is a query or a gallery item, not both",
            E.ExpectColumnValuesToBeInSet(
                column="role", value_set=["query", "gallery"], row_condition=rows
            ),
        ),
        expect(
            f"{name}-gallery",
            "every mated class has a gallery item",
            C.ExpectColumnValuesToBeInRows(column="label", row_condition=rows, rows=served),
        ),
        expect(
            f"{name}-gallery",
            "no gallery item of a non-mated class",
            C.ExpectColumnValuesToNotBeInRows(
                column="label", row_condition=gallery, rows=_roles(name, "nonmated")
            ),
        ),
        expect(
            f"{name}-query",
            "every mated query has a positive in the gallery",
            C.ExpectColumnValuesToBeInRows(column="label", row_condition=queries, rows=served),
        ),
        expect(
            f"{name}-pairs",
            "pairs are unique",
            E.ExpectCompoundColumnsToBeUnique(column_list=["item", "item_b"], row_condition=pairs),
        ),
        expect(
            f"{name}-pairs",
            "pair flags agree with labels (same-class pairs)",
            E.ExpectColumnPairValuesToBeEqual(
                column_A="label", column_B="label_b", row_condition=_pairs(name, True)
            ),
        ),
        expect(
            f"{name}-pairs",
            "pair flags agree with labels (different-class pairs)",
            E.ExpectSelectColumnValuesToBeUniqueWithinRecord(
                column_list=["label", "label_b"], row_condition=_pairs(name, False)
            ),
        ),
        expect(
            f"{name}-pairs",
            "pairs are balanced (40-60% same-class)",
            E.ExpectColumnMeanToBeBetween(
                column="same", min_value=0.4, max_value=0.6, row_condition=pairs
            ),
        ),
    ]


def context() -> Any:
    """A fresh ephemeral GX context (nothing written, no network, no progress bars): GX
    validates only inside an active one."""
    from great_expectations.data_context.types.base import ProgressBarsConfig

    ctx = gx.get_context(mode="ephemeral")
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False)
    return ctx


def _distinct(expectations: list[Any]) -> list[Any]:
    """Each expectation once (two relations may promise the same thing in the same words), in
    order. GX's own ``add_expectation`` does this too, comparing every pair: minutes for a
    sequence's hundreds."""
    seen: set[str] = set()
    out = []
    for e in expectations:
        config = e.configuration.to_json_dict()
        key = json.dumps(
            [config["type"], config["kwargs"], config.get("description")], sort_keys=True
        )
        if key not in seen:
            seen.add(key)
            out.append(e)
    return out


def build_suite(params: SplitParams) -> gx.ExpectationSuite:
    """The expectation suite of a split made with ``params``."""
    held_out = ["eval", *([VALIDATION] if params.validation is not None else [])]
    expectations: list[Any] = []
    names = [n for sc in params.scenarios for n in sc.names()]
    expectations += _training_sets(names, held_out)
    for sc in params.scenarios:
        for relation in sc.relations():
            expectations += relation_expectations(relation)
    for name in held_out:
        expectations += _held_out_set(name)
    if params.validation is not None:
        # Validation classes are disjoint from training and from the evaluation set, as the
        # evaluation classes are from training (compat.data.split.build_validation).
        expectations.append(
            expect(
                VALIDATION,
                "no evaluation class in validation",
                C.ExpectColumnValuesToNotBeInRows(
                    column="label", row_condition=items(VALIDATION), rows=items("eval")
                ),
            )
        )
    return gx.ExpectationSuite(name=SUITE_NAME, expectations=_distinct(expectations), notes=NOTE)


def suite_text(suite: gx.ExpectationSuite) -> str:
    """The suite as the JSON file it is kept in: sorted keys, so equal suites are equal bytes."""
    return json.dumps(suite.to_json_dict(), indent=2, sort_keys=True) + "\n"


def load_suite(text: str) -> gx.ExpectationSuite:
    """A suite read back from its JSON (the custom expectation types are registered)."""
    return gx.ExpectationSuite(**json.loads(text))
