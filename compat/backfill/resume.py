"""Resuming a backfill: its finished blocks, saved in a work folder beside the output.

A run saves each finished block (atomically) in ``.<out name>.backfill/`` beside the output,
keyed by a digest of the job (:func:`job_digest`: input sha256, psi sha256, selected rows, batch
size, output format), with its sha256 in ``batch-<b>.<ext>.sha256``, written after the block. A
killed run started again with the same arguments skips the saved blocks that pass their checksum
(a damaged one is computed again, with a warning); a work folder of another job is discarded,
and a folder holding anything a backfill does not write is refused (exit 2), never discarded.
For a Parquet output the saved blocks are the output's shards; otherwise they are concatenated
into the output (:func:`compat.backfill.output.write_output`), and the folder is removed once
the output is written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from compat.errors import BadInputError, UsageError
from compat.io import (
    atomic_path,
    fingerprint,
    sha256_bytes,
    sha256_file,
    storage_errors,
    write_json,
    write_text,
)

STATE = "state.json"
# What a work folder holds: batches, their checksums, the state, the dataset meta of a Parquet
# output, and the temporaries of atomic writes.
_WORK_ENTRY = re.compile(
    r"batch-\d{6}\.(npy|parquet)(\.sha256)?|state\.json|_compat\.json|\..*\.tmp"
)


def work_dir_for(out: str | os.PathLike[str]) -> Path:
    """The folder holding an unfinished backfill's finished batches."""
    p = Path(out)
    return p.parent / f".{p.name}.backfill"


def _batch_path(work: Path, b: int, fmt: str = "npz") -> Path:
    return work / f"batch-{b:06d}.{'parquet' if fmt == 'parquet' else 'npy'}"


def _sum_path(batch: Path) -> Path:
    """Where a finished batch's sha256 is kept (written after the batch itself)."""
    return batch.with_name(batch.name + ".sha256")


def job_digest(
    *,
    input_sha256: str,
    psi_sha256: str,
    rows: np.ndarray,
    batch_size: int,
    assume_from: bool,
    out_format: str,
) -> str:
    """What a work folder is keyed by: a run resumes only the batches of the same job."""
    return fingerprint(
        {
            "input_sha256": input_sha256,
            "psi_sha256": psi_sha256,
            "rows": sha256_bytes(np.ascontiguousarray(rows, dtype=np.int64).tobytes()),
            "batch_size": batch_size,
            "assume_from": assume_from,
            "out_format": out_format,
        }
    )


def check_work_folder(work: Path) -> None:
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


def resume_state(
    work: Path, out: Path, job: str, n_batches: int, say: Callable[[str], Any], fmt: str
) -> set[int]:
    """The finished batches of this job in ``work`` (each checked against its sha256); a work
    folder of another job is discarded. A folder that cannot be written beside ``out`` is a
    usage error (exit 2); a full disk a :class:`~compat.errors.StorageError` (exit 5)."""
    try:
        with storage_errors(work):
            return _resume_state(work, job, n_batches, say, fmt)
    except OSError as err:
        raise UsageError(f"--out {out}: cannot write beside it ({_one_line(err)})") from None


def _resume_state(
    work: Path, job: str, n_batches: int, say: Callable[[str], Any], fmt: str
) -> set[int]:
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


class Parts:
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


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


__all__ = [
    "STATE",
    "Parts",
    "check_work_folder",
    "job_digest",
    "resume_state",
    "work_dir_for",
]
