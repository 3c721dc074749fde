"""Backfill a table gallery in place: the new version's column, ``vec_<to>``, added to the
LanceDB table (or filled further) by psi or another gallery map, without the images and without
rewriting any other column.

The table gallery is :mod:`compat.embeddings.table`; how a column is filled, and what Lance
rewrites, is :mod:`compat.embeddings.table_fill`. This module is the backfill around it:

* **Which rows**: a row is in ``--to`` when its ``vec_<to>`` is not null, else in ``--from``
  when its ``vec_<from>`` is not null; a row with neither is bad input (exit 4). ``fraction`` and
  ``order`` choose the rows to upgrade as the file backfill does (:mod:`compat.backfill.plan`),
  by table row; the rows not chosen stay null in ``vec_<to>``.
* **Row for row the file backfill**: each chosen row is the map's ``apply`` of its ``vec_<from>``
  at its table row (:mod:`compat.models.rowblocks`), so its bits are those the file backfill
  writes for the same row of the same gallery as a file, whatever the batch size, engine or
  resumption. The payload, ``vec_<from>`` and every other column keep their files byte for
  byte; so do the fragments with no chosen row.
* **Provenance**: ``vec_<to>``'s field metadata names the version, its weights (psi's
  ``to_weights_sha256``, a map's target) and, among its sources, the map (kind, folder, weights
  sha256: the card's provenance), written before the rows (:func:`~compat.embeddings.table_fill.
  declare_column`).
* **One writer per table**: the table's lock (:func:`~compat.embeddings.table_fill.table_lock`);
  a second backfill (or embed, or import) of the table is exit 6.
* **Resumable**: each fragment's finished file is recorded, with its sha256, in the work folder
  ``.<name>.lance.backfill/`` beside the table, keyed by the job (table version, column, map,
  rows, batch size). A killed run started again skips the recorded fragments whose files pass
  their checksum and ends in the same table as a run never killed; the rows land in one commit
  (nothing of a run is visible before it). A failed run removes its files and work folder.
* **Engines**: ``local`` runs the fragments one after another here; ``ray`` runs each fragment as
  a Ray task that reads its rows, runs the map and writes the fragment's file itself, the commit
  staying at the driver (:func:`compat.backfill.engines.make_tasks`). Ray Data's ``write_lance``
  only creates, appends or overwrites whole rows, so it cannot add a column in place, and each
  task reads its own fragment rather than through ``read_lance`` (LanceDB's ``lance-ray``
  package adds columns with the same per-fragment task pool; docs/findings.md, "LanceDB
  galleries").

A refused psi upgrades nothing and writes nothing (the caller exits 7), as for files.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compat.backfill.apply import DEFAULT_BATCH, BackfillResult, check_map_card
from compat.backfill.engines import ENGINES, make_tasks, upgrade_rows
from compat.backfill.plan import select_rows
from compat.backfill.progress import Bar
from compat.backfill.resume import work_dir_for
from compat.embeddings.table import Fragment, open_table
from compat.embeddings.table_columns import VectorColumn, column_for, vectors_of
from compat.embeddings.table_fill import (
    FILE_PREFIX,
    FragmentFile,
    commit_column,
    declare_column,
    fragment_file,
    remove_unreferenced,
    table_lock,
    write_fragment_column,
)
from compat.errors import BadInputError, NotFoundError, UsageError
from compat.io import fingerprint, sha256_bytes, sha256_file, write_json

STATE = "state.json"
# Rows read from the table at once, whatever --batch-size asks (which may be more): Lance's
# reader holds a few batches beside the one being mapped; a 1M-row backfill peaked at 1,158 MB
# read 65,536 rows at a time, 1,024 MB 16,384 at a time, 965 MB 8,192 at a time (the file
# backfill's default batch; docs/findings.md, "LanceDB galleries"). A row's bits do not depend
# on its batch (compat.models.rowblocks).
READ_ROWS = 8192


@dataclass
class TableBackfillResult(BackfillResult):
    """A file backfill's result (``out`` is the table itself), the column and the table's
    version after the commit (None when nothing was written); ``batches`` counts fragments."""

    column: str = ""
    table_version: int | None = None


@dataclass(frozen=True)
class FragmentJob:
    """What one fragment's task needs (picklable: a Ray task gets it whole)."""

    table: str
    version: int
    fragment: Fragment
    column: VectorColumn
    source: str  # the vec_<from> column
    source_dim: int
    existing: bool  # the column already has rows to keep
    psi: str
    psi_sha256: str
    psi_where: str
    device: str
    selected: np.ndarray = field(repr=False)  # (fragment rows,) bool
    batch_size: int = DEFAULT_BATCH
    name: str = ""


def fill_fragment(job: FragmentJob, progress: Any = None) -> FragmentFile:
    """One fragment's new ``vec_<to>`` file: the rows it had, the chosen rows mapped, the rest
    null (what every engine runs; the map is opened once per process)."""
    from compat.embeddings.table import GalleryTable

    table = GalleryTable(job.table, job.version)
    col, frag = job.column, job.fragment
    read = [job.source, col.name] if job.existing else [job.source]

    def compute(batch: Any, start: int) -> tuple[np.ndarray, np.ndarray]:
        x, _ = vectors_of(batch.column(job.source), job.source_dim, f"{table.where}: {job.source}",
                          start)  # fmt: skip
        if job.existing:
            y, ok = vectors_of(batch.column(col.name), col.dim, f"{table.where}: {col.name}",
                               start)  # fmt: skip
            y, ok = y.copy(), ok.copy()
        else:
            y, ok = np.zeros((len(x), col.dim), np.float32), np.zeros(len(x), bool)
        sel = job.selected[start - frag.start : start - frag.start + len(x)]
        if sel.all() and not job.existing:  # every row mapped: psi's rows as they are (no copies)
            up = upgrade_rows(job.psi, job.psi_sha256, job.device, x, start)
            _check_finite(up, start, job.psi_where)
            return up, np.ones(len(up), bool)
        if sel.any():
            # The whole batch goes through the map at its table rows: a row's bits never depend
            # on which other rows were chosen (fixed row blocks).
            up = upgrade_rows(job.psi, job.psi_sha256, job.device, x, start)
            y[sel], ok[sel] = up[sel], True
            _check_finite(y, start, job.psi_where, sel)
        return y, ok

    return write_fragment_column(table, frag, col, read, compute,
                                 batch_size=min(job.batch_size, READ_ROWS),
                                 name=job.name, progress=progress)  # fmt: skip


def _check_finite(y: np.ndarray, start: int, where: str, rows: np.ndarray | None = None) -> None:
    """psi's output for the batch at table row ``start`` (``rows``: the mapped ones) holds no
    NaN or inf; else BadInputError naming the first such table row."""
    bad = ~np.isfinite(y).all(axis=1)
    if rows is not None:
        bad &= rows
    if bad.any():
        r = start + int(np.flatnonzero(bad)[0])
        raise BadInputError(f"{where}: psi produced NaN or inf for table row {r}")


def backfill_table(
    path: str | Path,
    *,
    source: str,
    target: str,
    psi_dir: str | Path,
    fraction: float = 1.0,
    order: str = "oldest",
    seed: int = 0,
    batch_size: int = DEFAULT_BATCH,
    progress: bool | None = None,
    device: str = "cpu",
    engine: str = "local",
    log: Any = None,
) -> TableBackfillResult:
    """Add (or fill further) ``vec_<target>`` of the table at ``path`` with the map in
    ``psi_dir`` applied to ``vec_<source>``, in place; see the module docstring."""
    from compat.embeddings.search import resolve_device
    from compat.maps.folder import open_card

    say = log or (lambda msg: None)
    started = time.perf_counter()
    path = Path(path)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if source == target:
        raise UsageError(f"--from and --to are both {source!r}")
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    device = resolve_device(device)
    if not path.exists():
        raise NotFoundError(f"{path}: table not found")
    psi_path = Path(psi_dir)
    card = open_card(psi_path)
    psi_where = str(psi_path / "card.json")
    with table_lock(path):
        table = open_table(path)
        table.check_ids()
        src = table.column(source)
        if src is None:
            raise BadInputError(
                f"{table.where}: {column_for(source)}: no column for --from {source} (vector "
                f"columns: {', '.join(table.vectors)})"
            )
        check_map_card(card, source, target, src.dim, psi_where)
        _check_weights(card, src, table.where, psi_where)
        tgt = table.column(target)
        if tgt is not None and tgt.dim != card.out_dim:
            raise BadInputError(
                f"{table.where}: {tgt.name}: the column holds {tgt.dim}-dim rows, the map makes "
                f"{card.out_dim}-dim ones (the wrong width)"
            )
        is_source, is_target = _row_masks(table, src, tgt, source)
        n_source = int(is_source.sum())
        result = functools.partial(
            TableBackfillResult, gallery=str(path), out=str(path), source=source, target=target,
            total=table.n, psi_weights_sha256=card.weights_sha256, column=column_for(target),
        )  # fmt: skip
        if card.is_refused:
            return result(
                upgraded=0, already=table.n - n_source, remaining=n_source, batches=0,
                resumed_batches=0, seconds=time.perf_counter() - started,
                refused=card.refused.reason,
            )  # fmt: skip
        # The rows to map, as one mask (at 4M rows a list of row numbers and its sorted copies
        # for the job's digest took ~150 MB): every --from row, or those --fraction picks in the
        # file backfill's order (compat.backfill.plan, on the rows' versions).
        if fraction >= 1.0:
            chosen, already = is_source, table.n - n_source
        else:
            versions = np.where(is_target, target, np.where(is_source, source, ""))
            selection = select_rows(versions, source, target, fraction=fraction, order=order,
                                    seed=seed)  # fmt: skip
            del versions
            chosen, already = np.zeros(table.n, dtype=bool), selection.already
            chosen[selection.rows] = True
        del is_target
        n_rows = int(chosen.sum())
        work = work_dir_for(path)
        if not n_rows:
            _discard(work, path, say, None)
            return result(upgraded=0, already=already, remaining=n_source, batches=0,
                          resumed_batches=0, seconds=time.perf_counter() - started)  # fmt: skip
        column = VectorColumn(
            column_for(target), target, card.out_dim, _target_weights(card),
            [{**card.provenance(psi_path), "kind": "map", "map_kind": card.kind,
              "from": source, "from_column": src.name}],
        )  # fmt: skip
        table = declare_column(table, column)
        job = fingerprint({
            "table_version": int(table.ds.version), "column": column.name, "source": src.name,
            "map": card.weights_sha256, "rows": sha256_bytes(np.packbits(chosen).tobytes()),
            "batch_size": batch_size, "storage": table.ds.data_storage_version,
        })  # fmt: skip
        done = _resume(work, path, job, say)
        existing = tgt is not None and _has_rows(table, column.name)
        args = (column.name, src, existing, psi_path, card, psi_where, device, chosen, batch_size)
        jobs = [
            _job(table, path, frag, *args, job)
            for frag in table.fragments()
            if chosen[frag.start : frag.start + frag.rows].any()
        ]
        todo = [j for j in jobs if j.fragment.id not in done]
        if done:
            say(
                f"backfill: resuming: {len(jobs) - len(todo)} of {len(jobs)} fragments already done"
            )
        try:
            files = [done[j.fragment.id] for j in jobs if j.fragment.id in done]
            rows_todo = sum(j.fragment.rows for j in todo)
            with Bar(rows_todo, 0, progress, f"backfill {source} -> {target} ({path.name})") as bar:
                t0, moved = time.perf_counter(), [0]

                def advance(n: int) -> None:
                    moved[0] += n
                    bar.advance(n, moved[0] / max(time.perf_counter() - t0, 1e-9))

                local = engine == "local"
                fn = functools.partial(fill_fragment, progress=advance) if local else fill_fragment
                for finished in make_tasks(engine).map(fn, todo):
                    write_json(work / f"fragment-{finished.fragment:06d}.json", asdict(finished))
                    files.append(finished)
                    if not local:
                        advance(next(j.fragment.rows for j in todo
                                     if j.fragment.id == finished.fragment))  # fmt: skip
            version = commit_column(table, column.name, files)
        except Exception:
            # A failed run leaves nothing; a killed or interrupted one (KeyboardInterrupt is no
            # Exception) keeps its finished fragments for the next run to resume.
            remove_unreferenced(path, f"{FILE_PREFIX}{job}-")
            shutil.rmtree(work, ignore_errors=True)
            raise
        shutil.rmtree(work, ignore_errors=True)
        return result(
            upgraded=n_rows, already=already, remaining=n_source - n_rows,
            batches=len(jobs), resumed_batches=len(jobs) - len(todo),
            seconds=round(time.perf_counter() - started, 4), table_version=version,
        )  # fmt: skip


def _job(
    table: Any, path: Path, frag: Fragment, column: str, src: VectorColumn, existing: bool,
    psi_path: Path, card: Any, psi_where: str, device: str, chosen: np.ndarray, batch_size: int,
    job: str,
) -> FragmentJob:  # fmt: skip
    """One fragment's job (absolute paths: a Ray worker may run elsewhere)."""
    return FragmentJob(
        str(path.resolve()), int(table.ds.version), frag, table.vectors[column], src.name,
        src.dim, existing, str(psi_path.resolve()), card.weights_sha256, psi_where, device,
        chosen[frag.start : frag.start + frag.rows], batch_size, fragment_file(job, frag.id),
    )  # fmt: skip


def _row_masks(
    table: Any, src: VectorColumn, tgt: VectorColumn | None, source: str
) -> tuple[np.ndarray, np.ndarray]:
    """(rows in ``--from``, rows in ``--to``) for the plan: a row is in ``--to`` where
    ``vec_<to>`` holds it, else in ``--from`` where ``vec_<from>`` does; a row with neither is
    bad input."""
    names = [src.name] + ([tgt.name] if tgt is not None else [])
    masks = table.valid(names)
    is_target = masks[tgt.name] if tgt is not None else np.zeros(table.n, dtype=bool)
    is_source = masks[src.name] & ~is_target
    missing = np.flatnonzero(~(is_source | is_target))
    if missing.size:
        i = int(missing[0])
        also = f" (nor {tgt.name})" if tgt is not None else ""
        raise BadInputError(
            f"{table.where}: {src.name}: row {i} (id {str(table.ids()[i])!r}) has no {src.name}{also}: "
            f"it was not made by --from {source}"
        )
    return is_source, is_target


def _check_weights(card: Any, src: VectorColumn, where: str, psi_where: str) -> None:
    """psi fitted on other weights of ``--from`` than made the column's rows is refused (a
    map's card records the rows it was fitted on, not weights: not checked)."""
    from compat.models.card import UpgradeCard, check_upgrade

    if isinstance(card, UpgradeCard) and src.weights_sha256 is not None:
        check_upgrade(
            card,
            psi_where,
            target=card.to,
            from_weights=src.weights_sha256,
            weights_origin=f"the rows of {where} {src.name} were made by",
            rerun="this psi does not apply to this gallery",
        )


def _target_weights(card: Any) -> str | None:
    """The weights of the version the map writes into: psi's card names them; a map's card
    names them when it was fitted on that version's rows."""
    sha = getattr(card, "to_weights_sha256", None)
    if sha is None and getattr(card, "data", None) is not None:
        sha = (card.data.target or {}).get("weights_sha256")
    return sha if isinstance(sha, str) else None


def _has_rows(table: Any, column: str) -> bool:
    """Whether any fragment has a file of ``column`` (a column just declared has none)."""
    fid = table.ds.lance_schema.field(column).id()
    return any(fid in f.fields for frag in table.ds.get_fragments() for f in frag.metadata.files)


def _discard(work: Path, table: Path, say: Any, reason: str | None) -> None:
    """Remove a work folder of another job and the files it wrote that the table does not read."""
    if not work.exists():
        return
    try:
        old = json.loads((work / STATE).read_text(encoding="utf-8")).get("job")
    except (OSError, ValueError, AttributeError):
        old = None
    if isinstance(old, str) and old.isalnum():
        remove_unreferenced(table, f"{FILE_PREFIX}{old}-")
    if reason:
        say(f"backfill: discarding {work}: {reason}")
    shutil.rmtree(work, ignore_errors=True)


def _resume(work: Path, table: Path, job: str, say: Any) -> dict[int, FragmentFile]:
    """The fragments this job finished before (their files present and passing their sha256);
    a work folder of another job is discarded; one holding anything else is refused (exit 2)."""
    import re

    if work.exists() and (work.is_symlink() or not work.is_dir()):
        raise UsageError(f"{work}: not a backfill's work folder (not a folder); remove it")
    if work.exists():
        entry = re.compile(r"state\.json|fragment-\d{6}\.json|\..*\.tmp")
        foreign = sorted(p.name for p in work.iterdir() if not entry.fullmatch(p.name))
        if foreign:
            raise UsageError(
                f"{work}: not a backfill's work folder (it holds {', '.join(foreign[:3])}); "
                "remove it"
            )
        try:
            same = json.loads((work / STATE).read_text(encoding="utf-8")).get("job") == job
        except (OSError, ValueError, AttributeError):
            same = False
        if not same:
            _discard(work, table, say, "an unfinished backfill of other inputs")
    if not work.exists():
        work.mkdir(parents=True)
        write_json(work / STATE, {"job": job})
        return {}
    done: dict[int, FragmentFile] = {}
    for record in sorted(work.glob("fragment-*.json")):
        try:
            f = FragmentFile(**json.loads(record.read_text(encoding="utf-8")))
            ok = sha256_file(table / "data" / f.file) == f.sha256
        except (OSError, ValueError, TypeError):
            ok = False
        if ok:
            done[f.fragment] = f
        else:
            say(f"backfill: warning: {record}: its fragment file is missing or damaged; "
                "computing it again")  # fmt: skip
            record.unlink()
    return done


__all__ = ["FragmentJob", "TableBackfillResult", "backfill_table", "fill_fragment"]
