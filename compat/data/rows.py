"""The split as one long frame: what the split's expectations read (:mod:`compat.data.suite`).

One row per fact of the split, nothing computed about how the sets relate (that is the suite's
work, done by Great Expectations). Columns:

==========  ====================================================================================
``kind``    ``source`` (an item of the source), ``item`` (an item of a training or held-out
            set), ``class`` (a class a set declares), ``pair`` (a verification pair)
``set``     the training set's manifest name, ``eval`` or ``validation``; null for the source
``item``    the item id (a pair: its first item)
``label``   the item's class (a declared class: the class; a pair: its first item's class)
``role``    a training item ``train``; a held-out item ``query``, ``gallery``, ``both`` or
            ``none``; a training set's class ``class``; a held-out set's non-mated class
            ``nonmated``
``position``  a training set's class: its index in the set's class order (the head's class id)
``on_disk`` a source item: whether its image is there (always, for an in-memory source)
``item_b``, ``label_b``, ``same``  a pair: its second item and class, and its same-class flag
==========  ====================================================================================

Row order follows the manifests, so equal splits give equal frames (and equal row indices in
the validation result).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from compat.data.sources import Source
from compat.data.split import EvalManifest, TrainManifest

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = (
    "kind",
    "set",
    "item",
    "label",
    "role",
    "position",
    "on_disk",
    "item_b",
    "label_b",
    "same",
)


def _held_out(name: str, ev: EvalManifest) -> list[tuple]:
    """A held-out set's items (with their query or gallery role), non-mated classes and pairs."""
    roles = ["none"] * len(ev.items)
    for i in ev.query:
        roles[i] = "query"
    for i in ev.gallery:
        roles[i] = "gallery" if roles[i] == "none" else "both"
    rows: list[tuple] = [
        ("item", name, i, c, r, None, None, None, None, None)
        for i, c, r in zip(ev.items, ev.labels, roles, strict=True)
    ]
    rows += [("class", name, None, c, "nonmated", None, None, None, None, None)
             for c in ev.nonmated_classes]  # fmt: skip
    n = len(ev.items)

    def at(k: int, values: list[str]) -> str | None:
        return values[k] if 0 <= k < n else None  # an index outside the set names nothing

    rows += [
        ("pair", name, at(a, ev.items), at(a, ev.labels), None, None, None,
         at(b, ev.items), at(b, ev.labels), bool(same))
        for a, b, same in ev.pairs
    ]  # fmt: skip
    return rows


def split_rows(
    source: Source,
    manifests: dict[str, TrainManifest],
    ev: EvalManifest,
    validation: EvalManifest | None = None,
) -> pd.DataFrame:
    """The long frame of a split: the source, every training set, the held-out sets."""
    import pandas as pd

    if source.in_memory:
        on_disk = [True] * len(source.items)
    else:  # an image file deleted since the data stage ran is an item no set may use
        on_disk = [source.path_of(it.id).is_file() for it in source.items]
    rows: list[tuple[Any, ...]] = [
        ("source", None, it.id, it.label, None, None, present, None, None, None)
        for it, present in zip(source.items, on_disk, strict=True)
    ]
    for name, m in manifests.items():
        rows += [
            ("item", name, i, c, "train", None, None, None, None, None)
            for i, c in zip(m.items, m.labels, strict=True)
        ]
        rows += [
            ("class", name, None, c, "class", k, None, None, None, None)
            for k, c in enumerate(m.classes)
        ]
    rows += _held_out("eval", ev)
    if validation is not None:
        rows += _held_out("validation", validation)
    # Object columns throughout: a null stays None (not NaN) and a position stays an int, so the
    # values GX reports are the manifests' own.
    return pd.DataFrame(rows, columns=list(COLUMNS), dtype=object)
