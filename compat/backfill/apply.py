"""Backfill a stored gallery with psi: upgrade its old rows into the new version's space, without
the images (BiCT's forward step applied to a real gallery file).

Guarantees:

* **The input is never modified**; ``out`` must be another file.
* **Any format, bounded memory**: input and output are ``.npz``, ``.npy`` or Parquet shards
  (:mod:`compat.embeddings.formats`; the format follows the path). Rows stream through in
  blocks of ``batch_size`` file rows (block b = rows b*B ..), so an ``.npy`` or Parquet gallery
  of any size is upgraded in the memory of one block (an ``.npz`` is read whole).
* **Nothing half-written**: the output (a file, or a folder of shards renamed into place)
  appears only when every block is done.
* **Only its own output is replaced**: ``out`` must not be, hold or lie inside a file of the
  input; an existing ``out`` is replaced only when a backfill wrote it (its ``meta`` records a
  ``backfill``; a Parquet folder holds nothing but ``_compat.json`` and ``batch-*.parquet``
  shards) or it is an empty folder. Anything else is a :class:`~compat.errors.UsageError`
  (exit 2) before any work.
* **One writer per output**: a run holds the lock file ``.<out name>.backfill.lock`` beside the
  output; a second run into the same ``out`` is a :class:`~compat.errors.ConflictError`
  (exit 6) that writes and removes nothing.
* **Resumable**: each finished block is saved (atomically) in a work folder beside the output,
  ``.<out name>.backfill/``, keyed by a digest of the job (input sha256, psi sha256, selected
  rows, batch size, output format), with its sha256 in ``batch-<b>.<ext>.sha256``. A killed run
  started again with the same arguments skips the saved blocks that pass their checksum (a
  damaged one is computed again, with a warning); a work folder of another job is discarded.
  For a Parquet output the saved blocks are the output's shards; otherwise they are
  concatenated into the output, and the folder is removed once the output is written.
* **Nothing left behind**: a run that fails (exit 2-6) removes its work folder and lock; only a
  killed or interrupted run keeps the work folder, for the next run to resume. A full disk,
  spent quota or read-only file system is a :class:`~compat.errors.StorageError` (exit 5)
  naming the path and the bytes needed, before any work when the free space is already short.
* **Row for row the in-memory path**: every row is computed by the map's ``apply``
  (:func:`compat.maps.open_map`; psi's :meth:`compat.maps.psi.FoldedUpgrade.apply`) in its
  fixed row block (:mod:`compat.models.rowblocks`), so its value depends neither on the batch
  size nor on which other rows were selected, and every engine (:mod:`compat.backfill.engines`:
  this process, or Ray workers) writes the same bits as the map applied to the whole matrix
  (psi: :func:`compat.maps.psi.upgrade_array`), on the same machine.
* **Provenance**: the output records every row's version (``row_versions``), a bundle-level
  ``version`` when all rows share one, and appends this run to ``meta["backfill"]``.

Refused with a one-line :class:`~compat.errors.BadInputError` (exit 4): rows not made by
``--from`` (bundle ``version``/``row_versions``, or the embedding-cache key naming other parent
weights than psi was fitted on), a psi of other versions or dimensions, NaN or inf rows, and a
partial backfill that would mix rows of two widths in one matrix.

Which rows (``fraction``, ``order``): :mod:`compat.backfill.plan`. Searching a partially
backfilled gallery: :mod:`compat.embeddings.mixed`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from compat.backfill.engines import ENGINES, make_engine
from compat.backfill.plan import Selection, bundle_version, check_rows, row_versions, select_rows
from compat.errors import BadInputError, ConflictError, NotFoundError, StorageError, UsageError
from compat.io import (
    atomic_path,
    fingerprint,
    free_bytes,
    human_bytes,
    sha256_bytes,
    sha256_file,
    storage_error,
    storage_errors,
    write_json,
    write_text,
)
from compat.models.card import UpgradeCard, check_upgrade

DEFAULT_BATCH = 8192
STATE = "state.json"
# Meta keys that describe an embedding-cache entry; they are not true of the upgraded bundle.
_CACHE_META = ("cache_key", "content_sha256")


@dataclass
class BackfillResult:
    gallery: str
    out: str
    source: str
    target: str
    total: int  # rows in the gallery
    upgraded: int  # rows upgraded by this run
    already: int  # rows that were in the target version before this run
    remaining: int  # rows still in the source version afterwards
    batches: int
    resumed_batches: int  # batches found finished from an interrupted run
    psi_weights_sha256: str
    seconds: float
    refused: str | None = None  # psi was refused when fitted: nothing upgraded, nothing written

    @property
    def written(self) -> bool:
        """Whether ``out`` was written (a refused psi writes nothing)."""
        return self.refused is None

    def to_json(self) -> dict[str, Any]:
        why = None if self.written else f"psi was refused when it was fitted: {self.refused}"
        return {**asdict(self), "written": self.written, "why": why}


def work_dir_for(out: str | os.PathLike[str]) -> Path:
    """The folder holding an unfinished backfill's finished batches."""
    p = Path(out)
    return p.parent / f".{p.name}.backfill"


def lock_path_for(out: str | os.PathLike[str]) -> Path:
    """The lock file a backfill into ``out`` holds while it runs."""
    p = Path(out)
    return p.parent / f".{p.name}.backfill.lock"


def _batch_path(work: Path, b: int, fmt: str = "npz") -> Path:
    return work / f"batch-{b:06d}.{'parquet' if fmt == 'parquet' else 'npy'}"


def _sum_path(batch: Path) -> Path:
    """Where a finished batch's sha256 is kept (written after the batch itself)."""
    return batch.with_name(batch.name + ".sha256")


_SHARD = re.compile(r"batch-\d{6}\.parquet")
# What a work folder holds: batches, their checksums, the state, the dataset meta of a Parquet
# output, and the temporaries of atomic writes.
_WORK_ENTRY = re.compile(
    r"batch-\d{6}\.(npy|parquet)(\.sha256)?|state\.json|_compat\.json|\..*\.tmp"
)


def _same_file(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _check_psi(card: UpgradeCard, source: str, target: str, dim: int | None, where: str) -> None:
    """psi must upgrade ``--from`` into ``--to`` and take the gallery's row width."""
    check_upgrade(
        card,
        where,
        source=source,
        target=target,
        wanted=f"not --from {source} -> --to {target}",
        in_dim=dim,
        rows_of="the gallery's rows",
    )


def _read_map_card(psi_path: Path) -> Any:
    """psi's upgrade card, or the card of a :mod:`compat.maps` gallery map fitted between any
    two versions or embedding files (``compat adapt --role gallery-map``): both have what a
    backfill reads (``to``, ``out_dim``, ``weights_sha256``, ``is_refused``/``refused``)."""
    from compat.maps.folder import open_card

    return open_card(psi_path)


def _check_map(card: Any, source: str, target: str, dim: int | None, where: str) -> None:
    """A fitted map must be a gallery map from ``--from`` into ``--to`` taking the rows' width."""
    if card.role != "gallery-map":
        raise BadInputError(
            f"{where}: role: a {card.role} maps queries, not stored rows; fit a gallery map "
            "(compat adapt --role gallery-map)"
        )
    if (card.from_, card.to) != (source, target):
        raise BadInputError(
            f"{where}: from/to: the map reads {card.from_} and writes {card.to}, not --from "
            f"{source} -> --to {target}"
        )
    if dim is not None and card.in_dim != dim:
        raise BadInputError(
            f"{where}: in_dim: the map reads {card.in_dim}-dim rows, the gallery's rows are "
            f"{dim}-dim"
        )


def _check_cache_key(meta: dict[str, Any], card: UpgradeCard, where: str, psi_where: str) -> None:
    """A gallery that came out of the embedding cache names the weights that made it."""
    if not isinstance(card, UpgradeCard):  # a fitted map records the files it was fitted on
        return
    key = meta.get("cache_key")
    made_by = key.get("weights_sha256") if isinstance(key, dict) else None
    check_upgrade(
        card,
        psi_where,
        target=card.to,
        from_weights=made_by if isinstance(made_by, str) else None,
        weights_origin=f"the rows of {where} were made by (meta.cache_key)",
        rerun="this psi does not apply to this gallery",
    )


class _Bar:
    """A rich progress bar on stderr (rows upgraded, rows/s); silent when disabled."""

    def __init__(self, total: int, done: int, enabled: bool | None, label: str) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.total, self.done, self.label = total, done, label
        self._p: Any = None
        self._task: Any = None

    def __enter__(self) -> _Bar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[rate]:>9.0f} rows/s"),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self._p.__enter__()
            self._task = self._p.add_task(
                self.label, total=self.total, completed=self.done, rate=0.0
            )
        return self

    def advance(self, rows: int, rate: float) -> None:
        if self._p is not None:
            self._p.update(self._task, advance=rows, rate=rate)

    def __exit__(self, *exc: object) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)


def backfill(
    gallery: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    source: str,
    target: str,
    psi_dir: str | os.PathLike[str],
    fraction: float = 1.0,
    order: str = "oldest",
    seed: int = 0,
    batch_size: int = DEFAULT_BATCH,
    assume_from: bool = False,
    progress: bool | None = None,
    device: str = "cpu",
    engine: str = "local",
    log: Any = None,
) -> BackfillResult:
    """Upgrade ``gallery`` rows made by ``source`` into ``target`` with the psi in ``psi_dir``;
    write the result to ``out``. See the module docstring for the guarantees.

    ``gallery`` and ``out`` are any of the formats of :mod:`compat.embeddings.formats` (the
    format follows the path). Rows are read, upgraded and saved one block of ``batch_size``
    rows at a time, so memory stays bounded for ``.npy`` and Parquet galleries of any size.
    ``engine="ray"`` runs psi as Ray tasks (:mod:`compat.backfill.engines`); its output is
    identical.
    """
    from compat.embeddings.formats import GalleryReader, format_of

    say = log or (lambda msg: None)
    started = time.perf_counter()
    gallery_path, out_path = Path(gallery), Path(out)
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if source == target:
        raise UsageError(f"--from and --to are both {source!r}")
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    from compat.embeddings.search import resolve_device

    device = resolve_device(device)  # a name or a device this machine lacks: exit 2, at once
    if not gallery_path.exists():
        raise NotFoundError(f"{gallery_path}: file not found")
    if _same_file(gallery_path, out_path):
        raise UsageError(f"--out {out_path} is the input gallery; the input is never modified")
    out_format = format_of(out_path)
    _check_out(out_path, out_format)
    psi_path = Path(psi_dir)
    card = _read_map_card(psi_path)
    psi_where = str(psi_path / "card.json")

    reader = GalleryReader(gallery_path)
    where = reader.where
    _check_apart(reader, out_path, out_format)
    versions = row_version_array(
        reader.version,
        reader.row_versions,
        reader.n,
        where=where,
        assume=source if assume_from else None,
    )
    check_rows(versions, source, target, where)
    n_source = int((versions == source).sum())
    check = _check_psi if isinstance(card, UpgradeCard) else _check_map
    check(card, source, target, reader.dim if n_source else None, psi_where)
    # What every result of this run shares; the elapsed time is read when it is built.
    result = functools.partial(
        BackfillResult,
        gallery=str(gallery_path),
        out=str(out_path),
        source=source,
        target=target,
        total=reader.n,
        psi_weights_sha256=card.weights_sha256,
    )
    if card.is_refused:
        # The upgrade stage saved the identity because psi did not beat the gallery left alone:
        # relabelling unchanged rows as `target` would misstate where they came from.
        return result(
            upgraded=0,
            already=int(reader.n - n_source),
            remaining=n_source,
            batches=0,
            resumed_batches=0,
            seconds=time.perf_counter() - started,
            refused=card.refused.reason,
        )
    if n_source:
        _check_cache_key(reader.meta, card, where, psi_where)
    if fraction >= 1.0:  # every --from row: no ranking needed (O(n) index arrays saved)
        is_source = versions == source
        rows = np.flatnonzero(is_source)
        selection = Selection(rows=rows, already=int(reader.n - is_source.sum()), total=reader.n)
        del is_source
    else:
        selection = select_rows(versions, source, target, fraction=fraction, order=order, seed=seed)
        rows = selection.rows
    out_dim = card.out_dim
    left = n_source - len(rows)
    if out_dim != reader.dim and selection.already:
        raise BadInputError(
            f"{where}: embeddings: rows already in {target} have {reader.dim} dims, "
            f"but psi makes {out_dim}-dim rows"
        )
    if out_dim != reader.dim and len(rows) and left:
        raise BadInputError(
            f"{psi_where}: out_dim: psi makes {out_dim}-dim rows from {reader.dim}-dim ones; "
            "a partial backfill would mix both widths in one gallery; use --fraction 1"
        )
    if out_format == "npz" and reader.labels is None:
        raise BadInputError(f"{where}: labels: an .npz output needs labels; write .npy or Parquet")

    work = work_dir_for(out_path)
    with _OutLock(out_path):
        _check_replaceable(out_path, out_format)
        _check_work_folder(work)
        _remove_stale_swaps(out_path)
        try:
            return _run(
                reader, out_path, out_format, work, card, psi_path, psi_where, rows, selection,
                versions, n_source, result, say, started,
                source=source, target=target, fraction=fraction, order=order, seed=seed,
                batch_size=batch_size, assume_from=assume_from, progress=progress,
                device=device, engine=engine,
            )  # fmt: skip
        except Exception:
            # A failed run leaves nothing; a killed or interrupted one (KeyboardInterrupt is no
            # Exception) keeps its finished batches for the next run to resume.
            shutil.rmtree(work, ignore_errors=True)
            raise


def _run(
    reader: Any,
    out_path: Path,
    out_format: str,
    work: Path,
    card: UpgradeCard,
    psi_path: Path,
    psi_where: str,
    rows: np.ndarray,
    selection: Selection,
    versions: np.ndarray,
    n_source: int,
    result: Any,
    say: Any,
    started: float,
    *,
    source: str,
    target: str,
    fraction: float,
    order: str,
    seed: int,
    batch_size: int,
    assume_from: bool,
    progress: bool | None,
    device: str,
    engine: str,
) -> BackfillResult:
    """The backfill proper, under the output's lock: resume, upgrade every block, assemble."""
    out_dim = card.out_dim
    input_sha = reader.sha256()
    job = fingerprint(
        {
            "input_sha256": input_sha,
            "psi_sha256": card.weights_sha256,
            "rows": sha256_bytes(np.ascontiguousarray(rows, dtype=np.int64).tobytes()),
            "batch_size": batch_size,
            "assume_from": assume_from,
            "out_format": out_format,
        }
    )
    selected = np.zeros(reader.n, dtype=bool)
    selected[rows] = True
    if len(rows) == reader.n:  # all rows end in --to: no second per-row array
        new_versions = np.full(reader.n, target)
    else:
        new_versions = versions.copy()
        new_versions[rows] = target
    del versions
    width = out_dim if len(rows) else reader.dim
    n_batches = (reader.n + batch_size - 1) // batch_size
    try:
        with storage_errors(work):
            done = _resume_state(work, job, n_batches, say, out_format)
    except OSError as err:
        raise UsageError(f"--out {out_path}: cannot write beside it ({_one_line(err)})") from None
    _check_room(out_path, work, reader.n, width, n_batches, len(done), out_format)
    meta = {k: v for k, v in reader.meta.items() if k not in _CACHE_META}
    history = list(meta.get("backfill", [])) if isinstance(meta.get("backfill"), list) else []
    history.append(
        {
            "from": source,
            "to": target,
            "psi_weights_sha256": card.weights_sha256,
            "from_weights_sha256": getattr(card, "from_weights_sha256", None),
            "to_weights_sha256": getattr(card, "to_weights_sha256", None),
            "input_sha256": input_sha,
            "fraction": fraction,
            "order": order,
            "seed": seed if order == "random" else None,
            "upgraded": len(rows),
            "total": reader.n,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    meta["backfill"] = history

    parts = _Parts(work, out_format, selected, new_versions, width)
    if done:
        say(f"backfill: resuming: {len(done)} of {n_batches} batches already done")
    label = f"backfill {source} -> {target}"
    done_rows = sum(min(batch_size, reader.n - b * batch_size) for b in done)
    runner = make_engine(engine, psi_path, card.weights_sha256, device)
    with _Bar(reader.n, done_rows, progress, label) as bar:
        t0, moved = time.perf_counter(), 0
        for block, y_all in runner.map(_jobs(reader, selected, batch_size, done)):
            y = _merge(block, y_all, selected, psi_where)
            parts.write(block.start // batch_size, block, y)
            moved += len(y)
            bar.advance(len(y), moved / max(time.perf_counter() - t0, 1e-9))

    _finish(parts, reader, out_path, n_batches, batch_size, new_versions, meta)
    return result(
        upgraded=len(rows),
        already=selection.already,
        remaining=n_source - len(rows),
        batches=n_batches,
        resumed_batches=len(done),
        seconds=round(time.perf_counter() - started, 4),
    )


def row_version_array(
    version: str | None,
    per_row: np.ndarray | None,
    n: int,
    *,
    where: str,
    assume: str | None,
) -> np.ndarray:
    """Every row's version as a NumPy string array (see :func:`compat.backfill.plan.row_versions`)."""
    if per_row is not None:
        return np.asarray(per_row, dtype=np.str_)
    one = row_versions(version, None, 1, where=where, assume=assume)[0]
    return np.full(n, one)


def _jobs(
    reader: Any, selected: np.ndarray, batch_size: int, done: set[int]
) -> Iterator[tuple[Any, np.ndarray | None, int]]:
    """(block, rows for psi or None, the block's first row) for every unfinished block: psi
    runs over the whole block when any of its rows is selected, so a row's value never
    depends on which other rows were (every row is computed in its fixed row block)."""
    for block in reader.blocks(batch_size, skip=done):
        sel = selected[block.start : block.start + len(block.embeddings)]
        yield block, (block.embeddings if sel.any() else None), block.start


def _merge(
    block: Any, y_all: np.ndarray | None, selected: np.ndarray, psi_where: str
) -> np.ndarray:
    """A block's output rows: psi's rows where selected, the stored rows elsewhere."""
    x = block.embeddings
    if y_all is None:
        return x
    sel = selected[block.start : block.start + len(x)]
    bad = ~np.isfinite(y_all[sel])
    if bad.any():
        r = int(np.flatnonzero(sel)[int(np.argwhere(bad)[0, 0])])
        raise BadInputError(
            f"{psi_where}: psi produced NaN or inf for gallery row {block.start + r}"
        )
    if sel.all():
        return y_all
    y = np.array(x, dtype=np.float32, copy=True)
    y[sel] = y_all[sel]
    return y


class _Parts:
    """Finished blocks in the work folder: ``batch-<b>.npy`` (the block's output rows) for
    ``.npz``/``.npy`` outputs, or ``batch-<b>.parquet`` (a whole output shard) for Parquet."""

    def __init__(
        self, work: Path, fmt: str, selected: np.ndarray, versions: np.ndarray, width: int
    ) -> None:
        self.work, self.fmt, self.versions, self.width = work, fmt, versions, width
        self.selected = selected

    def path(self, b: int) -> Path:
        return _batch_path(self.work, b, self.fmt)

    def write(self, b: int, block: Any, y: np.ndarray) -> None:
        """Save block ``b`` (atomically), then its sha256: a batch counts as finished only once
        both are on disk and agree."""
        from compat.embeddings.formats import write_shard

        path = self.path(b)
        size = 128 + int(y.shape[0]) * int(y.shape[1]) * 4  # the rows, as .npy or Parquet
        stop = block.start + len(y)
        if self.fmt == "parquet":
            ids = block.ids if block.ids is not None else _row_ids(block.start, stop)
            # Plain encoding's size: ids and row versions (string bytes + offsets), labels.
            size += int(np.char.str_len(ids).sum()) + 4 * len(y)
            size += int(np.char.str_len(self.versions[block.start : stop]).sum()) + 4 * len(y)
            size += 0 if block.labels is None else 8 * len(y)
        with atomic_path(path, size=size) as tmp:
            if self.fmt == "parquet":
                write_shard(tmp, ids, y, block.labels, self.versions[block.start : stop])
            else:
                with open(tmp, "wb") as f:
                    np.save(f, np.ascontiguousarray(y, dtype=np.float32))
            digest = sha256_file(tmp)
        write_text(_sum_path(path), digest + "\n")

    def read(self, b: int, rows: int) -> np.ndarray:
        p = self.path(b)
        y = np.load(p, allow_pickle=False)
        if y.shape != (rows, self.width) or y.dtype != np.float32:
            raise BadInputError(
                f"{p}: a saved batch has shape {y.shape}, expected {(rows, self.width)}; "
                f"delete {self.work} and run again"
            )
        return y


def _row_ids(start: int, stop: int) -> np.ndarray:
    """Ids for a gallery that has none: the row numbers, as strings."""
    return np.arange(start, stop).astype(np.str_)


def _finish(
    parts: _Parts,
    reader: Any,
    out: Path,
    n_batches: int,
    bs: int,
    versions: np.ndarray,
    meta: dict[str, Any],
) -> None:
    """Assemble the finished blocks into ``out`` (atomically), then drop the work folder."""
    from compat.embeddings.bundle import EmbeddingBundle, Sidecar, save_bundle, save_sidecar
    from compat.embeddings.formats import sidecar_of, write_dataset_meta, write_npy_header

    n, width, work = reader.n, parts.width, parts.work
    version = bundle_version(np.unique(versions).tolist())
    rows = [min(bs, n - b * bs) for b in range(n_batches)]
    try:
        if parts.fmt == "parquet":
            write_dataset_meta(work, version, reader.fingerprint, meta)
            (work / STATE).unlink()
            for checksum in work.glob("batch-*.sha256"):
                checksum.unlink()
            _replace_folder(work, out)
            return
        if parts.fmt == "npy":
            # The matrix is written first and renamed last: a failure in either leaves
            # neither (the sidecar is written only once the whole matrix is on disk).
            with atomic_path(out, size=128 + n * width * 4) as tmp:
                with open(tmp, "wb") as f:
                    write_npy_header(f, n, width)
                    for b in range(n_batches):
                        f.write(parts.read(b, rows[b]).data)
                save_sidecar(
                    sidecar_of(out),
                    Sidecar(
                        labels=reader.labels,
                        ids=reader.ids,
                        row_versions=versions,
                        version=version,
                        fingerprint=reader.fingerprint,
                        meta=meta,
                    ),
                )
        else:
            embeddings = np.empty((n, width), dtype=np.float32)
            for b in range(n_batches):
                embeddings[b * bs : b * bs + rows[b]] = parts.read(b, rows[b])
            ids = reader.ids
            save_bundle(
                out,
                EmbeddingBundle(
                    embeddings=embeddings,
                    labels=reader.labels,
                    ids=None if ids is None else ids.tolist(),
                    version=version,
                    fingerprint=reader.fingerprint,
                    row_versions=versions.tolist(),
                    meta=meta,
                ),
            )
    except OSError as err:
        full = storage_error(err, out)
        if full is not None:
            raise full from None
        raise UsageError(f"--out {out}: cannot write ({_one_line(err)})") from None
    shutil.rmtree(work, ignore_errors=True)


def _swap_name(target: Path, pid: int) -> Path:
    return target.parent / f".{target.name}.old-{pid}"


def _replace_folder(new: Path, target: Path) -> None:
    """Put folder ``new`` at ``target``; an existing ``target`` folder (one a backfill wrote:
    :func:`_check_replaceable`) is swapped out, then removed."""
    old = None
    if target.exists():
        old = _swap_name(target, os.getpid())
        os.replace(target, old)
    try:
        os.replace(new, target)
    except OSError:
        if old is not None:
            os.replace(old, target)  # the previous output stays where it was
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _remove_stale_swaps(out: Path) -> None:
    """Remove the swapped-out outputs (``.<name>.old-<pid>``) of killed runs."""
    from compat.io import _pid_alive

    for old in out.parent.glob(f".{glob_escape(out.name)}.old-*"):
        pid = old.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)


def glob_escape(name: str) -> str:
    import glob

    return glob.escape(name)


def _check_apart(reader: Any, out: Path, fmt: str) -> None:
    """``out`` (and, for ``.npy``, its sidecar; and the work folder) must not be, hold or lie
    inside a file of the input gallery: the input is never modified."""
    from compat.embeddings.formats import sidecar_of

    inputs = [f.resolve() for f in reader.files()]
    folder = reader.path.resolve() if reader.path.is_dir() else None
    written = [out, work_dir_for(out), lock_path_for(out)]
    if fmt == "npy":
        written.append(sidecar_of(out))
    for path in written:
        r = path.resolve()
        if folder is not None and (r == folder or r.is_relative_to(folder)):
            raise UsageError(
                f"--out {out}: {path} would be inside the input gallery {reader.path}; "
                "the input is never modified"
            )
        for f in inputs:
            if r == f or _same_file(f, path):
                raise UsageError(
                    f"--out {out}: {path} is a file of the input gallery; the input is never "
                    "modified"
                )
            if f.is_relative_to(r):
                raise UsageError(
                    f"--out {out}: the folder holds the input gallery ({f.name}); the input "
                    "is never modified"
                )


def _by_backfill(meta: Any) -> bool:
    """Whether a gallery's ``meta`` says a backfill wrote it."""
    return (
        isinstance(meta, dict) and isinstance(meta.get("backfill"), list) and bool(meta["backfill"])
    )


def _check_replaceable(out: Path, fmt: str) -> None:
    """An existing ``out`` may be replaced only if a backfill wrote it (or it is an empty
    folder); anything else is a usage error before any work."""
    from compat.embeddings.bundle import read_bundle_meta
    from compat.embeddings.formats import DATASET_META, sidecar_of
    from compat.errors import CompatError

    hint = "compat replaces only a gallery a backfill wrote; remove it or choose another --out"
    if out.is_symlink():
        raise UsageError(f"--out {out}: a symbolic link; {hint}")
    if fmt == "parquet":
        if not out.exists():
            return
        names = sorted(p.name for p in out.iterdir())
        if not names:
            return
        foreign = [
            n
            for n in names
            if n != DATASET_META and not (_SHARD.fullmatch(n) and (out / n).is_file())
        ]
        if foreign:
            more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
            raise UsageError(
                f"--out {out}: the folder holds files a backfill did not write "
                f"({', '.join(foreign[:3])}{more}); {hint}"
            )
        try:
            meta = json.loads((out / DATASET_META).read_text(encoding="utf-8")).get("meta")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            meta = None
        if not _by_backfill(meta):
            raise UsageError(
                f"--out {out}: a Parquet gallery no backfill wrote ({DATASET_META} records no "
                f"backfill); {hint}"
            )
        return
    owner = sidecar_of(out) if fmt == "npy" else out
    if not out.exists() and not owner.exists():
        return
    if owner.is_symlink() or not owner.is_file():
        raise UsageError(f"--out {out}: {owner.name} is missing or not a file; {hint}")
    try:
        meta = read_bundle_meta(owner)
    except CompatError:
        meta = None
    if not _by_backfill(meta):
        what = f"a file ({owner.name} records no backfill)" if owner != out else "a file"
        raise UsageError(f"--out {out}: {what} a backfill did not write; {hint}")


def _check_room(
    out: Path, work: Path, n: int, width: int, n_batches: int, done: int, fmt: str
) -> None:
    """A full disk is refused before any work when the free space already falls short of the
    batches still to save plus the output assembled from them (exit 5)."""
    rows = n * width * 4
    need = rows * (n_batches - done) // max(n_batches, 1) + (0 if fmt == "parquet" else rows)
    free = free_bytes(work)
    if free is not None and need > free:
        raise StorageError(
            f"{out}: cannot write: no space left on the device (the backfill needs about "
            f"{human_bytes(need)} ({need} bytes) for its batches and the output, "
            f"{human_bytes(free)} free)"
        )


class _OutLock:
    """The lock file beside ``out`` (``flock``), held for a whole run and removed after it: a
    second run into the same ``out`` is refused at once, writing and removing nothing."""

    def __init__(self, out: Path) -> None:
        self.out, self.path = out, lock_path_for(out)
        self.fd: int | None = None

    def __enter__(self) -> _OutLock:
        import fcntl

        while True:
            try:
                with storage_errors(self.path):
                    self.path.parent.mkdir(parents=True, exist_ok=True)  # --out new/g2.npz
                    fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError as err:
                raise UsageError(
                    f"--out {self.out}: cannot write beside it ({_one_line(err)})"
                ) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
                os.close(fd)
                raise ConflictError(
                    f"--out {self.out}: another backfill (pid {holder}) is writing it; wait for "
                    "it to finish, or choose another --out"
                ) from None
            try:  # the holder before us may have removed (and another run re-made) the file
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still holding it: a waiting run re-opens the path
        if self.fd is not None:
            os.close(self.fd)


def _check_out(out: Path, fmt: str) -> None:
    """Refuse an output that cannot be written (under a file, /proc, a folder where a file
    goes) with a one-line usage error, before any work."""
    parent = out.parent
    for p in [parent, *parent.parents]:
        if p.exists():
            if not p.is_dir():
                raise UsageError(f"--out {out}: {p} is a file, not a folder")
            if not os.access(p, os.W_OK):
                raise UsageError(f"--out {out}: {p} is not writable")
            break
    if str(out.resolve()).startswith(("/proc/", "/sys/", "/dev/")):
        raise UsageError(f"--out {out}: not a place for files (a kernel file system)")
    if fmt != "parquet" and out.is_dir():
        raise UsageError(f"--out {out}: a folder; a .npz or .npy output must be a file")
    if fmt == "parquet" and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: a file; a Parquet output is a folder of shards")


def _check_work_folder(work: Path) -> None:
    """An existing ``.<out>.backfill`` must be a backfill's work folder: it is resumed or
    discarded, and compat discards only what it wrote."""
    if not work.exists() and not work.is_symlink():
        return
    if work.is_symlink() or not work.is_dir():
        raise UsageError(
            f"{work}: not a backfill's work folder (not a folder); remove it or choose another "
            "--out"
        )
    foreign = sorted(p.name for p in work.iterdir() if not _WORK_ENTRY.fullmatch(p.name))
    if foreign:
        raise UsageError(
            f"{work}: not a backfill's work folder (it holds {', '.join(foreign[:3])}); remove "
            "it or choose another --out"
        )


def _resume_state(work: Path, job: str, n_batches: int, say: Any, fmt: str) -> set[int]:
    """The finished batches of this job in ``work`` (each checked against its sha256); a work
    folder of another job is discarded, one holding anything else refused."""
    state = work / STATE
    if work.exists():
        try:
            same = json.loads(state.read_text()).get("job") == job
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
            same = False
        if not same:
            say(f"backfill: discarding {work}: an unfinished backfill of other inputs")
            shutil.rmtree(work)
    if not work.exists():
        work.mkdir(parents=True)
        write_json(state, {"job": job, "batches": n_batches})
        return set()
    done = set()
    for b in range(n_batches):
        batch = _batch_path(work, b, fmt)
        checksum = _sum_path(batch)
        if not batch.is_file():
            checksum.unlink(missing_ok=True)
            continue
        try:
            want = checksum.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            want = None  # saved, but killed before its checksum: not finished
        if want is not None and sha256_file(batch) == want:
            done.add(b)
            continue
        if want is not None:
            say(
                f"backfill: warning: {batch}: a saved batch fails its sha256 (damaged on disk); "
                "computing it again"
            )
        batch.unlink()
        checksum.unlink(missing_ok=True)
    return done


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = ["DEFAULT_BATCH", "BackfillResult", "backfill", "lock_path_for", "work_dir_for"]
