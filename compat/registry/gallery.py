"""The gallery a promotion serves: a LanceDB table (:mod:`compat.embeddings.table`) known to the
registry (``compat promote --gallery TABLE``).

A table holds one ``vec_<version>`` column per version that embedded (or a map moved) its rows.
After a version V is promoted, V's queries read each row from ``vec_V`` where the row has it,
else from the newest other column holding it (:func:`served_rows`): the rows a partial
backfill has not reached yet are still another version's, and so are the rows a rollback to V
meets that only a newer version embedded. So the gate of V checks the rows the table actually
holds (:meth:`GalleryGate.check`), before anything is judged:

* every version whose rows V would serve is registered and is one the gate measures V's
  queries on: V itself, its parent and ``transitive`` ancestors, and for a rollback every
  version whose rows it serves (the promotion's rollback galleries); any
  other is bad input (exit 4) naming the column and its share of the rows;
* rows of ``vec_V`` a map moved there (their column's ``sources``) were moved from the parent
  by the very map the gate measures (``forward`` criteria or ``serve: backfill``, its weights'
  sha256 compared: :meth:`GalleryGate.check_map`); other mapped rows are bad input too.

The promotion log records, with the move, what was gated (:class:`GalleryRecord`): the table's
path, its version, the column V reads, each version's share of the rows, and a Lance tag on that
table version (:func:`tag_gallery`, ``compat-<version>-t<table version>``): Lance's clean-up
(``cleanup_old_versions``) keeps tagged versions, so the rows a recorded promotion served (and a
rollback would return to) stay restorable as long as the tag stays. ``compat show``, ``log`` and
``chain`` print it (:func:`describe`); ``compat verify`` checks it (:func:`problems`): the table
is there, the tag still names the recorded version, that version was not cleaned up, and the
table's current rows still serve production's column with no version the gate never checked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from compat.errors import BadInputError

TAG_PREFIX = "compat-"


class GalleryRecord(BaseModel):
    """What the promotion log records of the gallery a promotion gated (the ``gallery`` field of
    its ``pending`` line; ``tag`` is None in a report, before the move)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    table_version: int
    column: str
    rows: dict[str, int]  # version -> rows served from its column to the promoted version
    mapped: dict[str, str] = {}  # version -> sha256 of the map that moved rows into its column
    tag: str | None = None


def tag_name(version: str, table_version: int) -> str:
    """The Lance tag of the table version a promotion of ``version`` gated."""
    return f"{TAG_PREFIX}{version}-t{table_version}"


def served_rows(table: Any, version: str) -> dict[str, Any]:
    """Per version, the (n,) mask of the rows ``version``'s queries read from its column: a row
    from ``vec_<version>`` where it has one, else from the newest other column holding it."""
    import numpy as np

    from compat.embeddings.table_columns import column_for

    own = column_for(version)
    others = [c for c in table.vectors if c != own]
    names = others + ([own] if own in table.vectors else [])  # later columns win
    masks = table.valid(names)
    served = np.full(table.n, "", dtype=object)
    for name in names:
        served[masks[name]] = table.vectors[name].version
    missing = np.flatnonzero(served == "")
    if missing.size:
        raise BadInputError(f"{table.where}: row {int(missing[0])} has no vector in any column")
    return {table.vectors[n].version: served == table.vectors[n].version for n in names
            if (served == table.vectors[n].version).any()}  # fmt: skip


class GalleryGate:
    """A table's rows as ``version``'s queries would read them, checked against the gate."""

    def __init__(self, path: str | os.PathLike[str], version: str) -> None:
        from compat.embeddings.table import open_table
        from compat.embeddings.table_columns import column_for

        self.table = open_table(path)
        self.table.check_ids()
        self.version = version
        self.rows = {v: int(m.sum()) for v, m in served_rows(self.table, version).items()}
        own = self.table.column(version)
        mapped = [s for s in (own.sources if own is not None else []) if s.get("kind") == "map"]
        self.maps = mapped
        self.column = column_for(version)

    def where(self, version: str) -> str:
        """A served version's column and share, as errors name them."""
        from compat.embeddings.table_columns import column_for

        n = self.rows[version]
        return f"{self.table.where}: {column_for(version)} ({n:,} of {self.table.n:,} rows)"

    def check(self, contract: Any, reg: Any, served: list[str], where: str | Path, *,
              rollback: bool = False) -> None:  # fmt: skip
        """Every version whose rows the promoted version would serve is registered and measured
        by this gate (module docstring: ``served``, the versions a rollback is also checked on);
        BadInputError (exit 4) naming the column otherwise."""
        checked = {contract.version, contract.parent, *contract.transitive, *served} - {None}
        for v in self.rows:
            if reg.find(v) is None:
                raise BadInputError(
                    f"{self.where(v)}: {v} is not a registered version: the gate cannot measure "
                    f"{contract.version}'s queries on its rows"
                )
            if v not in checked:
                fix = (
                    f"list {v} in rollback.serve" if rollback
                    else f"backfill those rows into {contract.version}, or list {v} in transitive"
                )  # fmt: skip
                raise BadInputError(
                    f"{self.where(v)}: {contract.version}'s queries would read {v}'s rows, which "
                    f"its gate does not measure (it checks {', '.join(sorted(checked))}): {fix}"
                )
        if self.maps and self.version in self.rows and contract.parent is None:
            raise BadInputError(
                f"{self.where(self.version)}: rows a map moved into {self.version}, which has no "
                "parent to map from"
            )

    def check_map(self, psi: dict[str, Any] | None, contract: Any, where: str | Path) -> None:
        """Rows of the version's column that a map moved there came from the parent through the
        map the gate measured (``psi``: its provenance, None when no criterion measures mapped
        rows); BadInputError (exit 4) otherwise."""
        if not self.maps or self.version not in self.rows:
            return
        if psi is None:
            raise BadInputError(
                f"{self.where(self.version)}: rows a map moved into {self.version}, but "
                f"{where} measures no mapped rows: add a forward criterion or serve: backfill"
            )
        for m in self.maps:
            if m.get("from") != contract.parent or m.get("weights_sha256") != psi.get(
                "weights_sha256"
            ):
                raise BadInputError(
                    f"{self.where(self.version)}: rows moved from {m.get('from')} by the map "
                    f"{m.get('path')} (sha256 {str(m.get('weights_sha256'))[:12]}), but the gate "
                    f"measures {contract.parent}'s rows through {psi.get('path')} (sha256 "
                    f"{str(psi.get('weights_sha256'))[:12]})"
                )

    def summary(self) -> dict[str, Any]:
        """The gallery's part of the gate's report (a :class:`GalleryRecord` without its tag)."""
        mapped = {self.version: str(self.maps[-1].get("weights_sha256"))} if self.maps else {}
        return GalleryRecord(
            path=str(self.table.path.resolve()), table_version=int(self.table.ds.version),
            column=self.column, rows=self.rows,
            mapped=mapped if self.version in self.rows else {},
        ).model_dump()  # fmt: skip


def tag_gallery(summary: dict[str, Any], version: str) -> dict[str, Any]:
    """Tag the gated table version (kept by Lance's clean-up while the tag stays) and return
    the log's record of it; an existing tag on that version is kept, one on another version is
    a conflict with the table's history (exit 4)."""
    from compat.embeddings.table import lance_module

    record = GalleryRecord(**summary)
    name = tag_name(version, record.table_version)
    ds = lance_module().dataset(record.path)
    tags = ds.tags.list()
    have = tags.get(name)
    if have is None:
        ds.tags.create(name, record.table_version)
    elif _tag_version(have) != record.table_version:
        raise BadInputError(
            f"{record.path}: tag {name} names table version {_tag_version(have)}, not "
            f"{record.table_version}; remove it by hand"
        )
    return record.model_copy(update={"tag": name}).model_dump()


def _tag_version(tag: Any) -> int:
    """The table version a Lance tag names (a dict or an object, by Lance release)."""
    return int(tag["version"] if isinstance(tag, dict) else tag.version)


def record_of(entry: dict[str, Any], where: str = "promotion log") -> GalleryRecord | None:
    """A log record's gallery, typed (None without one); a malformed one is exit 4."""
    raw = entry.get("gallery")
    if raw is None:
        return None
    try:
        return GalleryRecord.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise BadInputError(f"{where}: gallery.{field}: {first['msg']}") from None


def last_gallery(promotions: list[dict[str, Any]], version: str | None = None) -> Any:
    """(record, promotion) of the last committed move (to ``version``, if named) that recorded a
    gallery; (None, None) when none did."""
    for p in reversed(promotions):
        if p.get("state") != "committed" or (version is not None and p.get("to") != version):
            continue
        record = record_of(p)
        if record is not None:
            return record, p
    return None, None


def describe(record: GalleryRecord) -> str:
    """One line: the table, its version and tag, the column served and each version's rows."""
    total = sum(record.rows.values()) or 1
    shares = ", ".join(
        f"{v} {n:,} ({n / total:.0%}{', mapped' if v in record.mapped else ''})"
        for v, n in record.rows.items()
    )
    tag = f", tag {record.tag}" if record.tag else ""
    return (
        f"gallery {record.path} (table version {record.table_version}{tag}): serves "
        f"{record.column}; rows {shares}"
    )


def problems(promotions: list[dict[str, Any]], production: str | None) -> list[str]:
    """What no longer matches the gallery production's last promotion recorded (``compat
    verify``): the table gone, its tag removed or moved, the recorded version cleaned up, the
    served column gone, or rows now served from a version that gate never checked."""
    if production is None:
        return []
    record, _ = last_gallery(promotions, production)
    if record is None:
        return []
    from compat.embeddings.table import lance_module
    from compat.errors import CompatError

    path = Path(record.path)
    if not path.exists():
        return [f"gallery {path}: the table is gone"]
    out = []
    ds = lance_module().dataset(str(path))
    tags = ds.tags.list()
    if record.tag is not None and record.tag not in tags:
        out.append(f"gallery {path}: tag {record.tag} was removed (clean-up may now delete "
                   f"table version {record.table_version})")  # fmt: skip
    elif record.tag is not None and _tag_version(tags[record.tag]) != record.table_version:
        out.append(f"gallery {path}: tag {record.tag} now names table version "
                   f"{_tag_version(tags[record.tag])}, not {record.table_version}")  # fmt: skip
    if record.table_version not in {int(v["version"]) for v in ds.versions()}:
        out.append(f"gallery {path}: table version {record.table_version}, which the promotion "
                   f"to {production} gated, was cleaned up")  # fmt: skip
    try:
        now = GalleryGate(path, production)
    except CompatError as err:
        return [*out, f"gallery {path}: {err.message}"]
    if production in record.rows and now.column not in now.table.vectors:
        out.append(f"gallery {path}: {record.column}, the column {production} reads, is gone")
    extra = [v for v in now.rows if v not in record.rows]
    if extra:
        out.append(
            f"gallery {path}: rows now served from {', '.join(extra)} "
            f"({', '.join(f'{now.rows[v]:,}' for v in extra)} rows), which the promotion to "
            f"{production} did not gate (moved by hand?)"
        )
    return out


__all__ = [
    "GalleryGate",
    "GalleryRecord",
    "describe",
    "last_gallery",
    "problems",
    "record_of",
    "served_rows",
    "tag_gallery",
    "tag_name",
]
