"""A file gallery written through compat's one checked-output path (:mod:`compat.outputs`): an
``.npz`` bundle, an ``.npy`` matrix with its ``.meta.npz`` sidecar, or a folder of Parquet
shards with ``_compat.json`` (:mod:`compat.embeddings.formats`).

* :func:`claim_gallery`: before any work, the path can hold the format (exit 2 otherwise; 5 on a
  read-only file system) and whatever is there already is a gallery a compat command wrote: its
  ``meta`` (the bundle's, the sidecar's, ``_compat.json``'s) records the command that made it
  (:data:`MAKERS`), and a Parquet folder holds nothing but compat's shards and ``_compat.json``.
  A user's own ``.npz``, a folder of other shards, a project folder: refused, never deleted.
* :func:`write_gallery`: the rows streamed into the format, nothing half-written: the matrix of
  an ``.npy`` renamed last, after its sidecar; the shards of a Parquet folder written into a new
  folder swapped in whole (:func:`compat.outputs.new_folder`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from compat.outputs import Owns, claim, folder_entries, new_folder

# The meta key each compat command that writes a file gallery records, and the command.
MAKERS = {
    "items": "compat embed",  # the items embedded (a split, manifest or folder)
    "backfill": "compat backfill",  # the backfills the rows went through
    "table": "compat data export",  # the table the rows came from
}
SHARD = re.compile(r"(part|batch)-\d+\.parquet")  # the shard names compat's writers use


def maker(meta: Any) -> str | None:
    """The compat command whose ``meta`` this is (:data:`MAKERS`), or None."""
    if not isinstance(meta, dict):
        return None
    return next((cmd for key, cmd in MAKERS.items() if meta.get(key)), None)


def _file_meta(path: Path) -> Any:
    from compat.embeddings.bundle import read_bundle_meta
    from compat.errors import CompatError

    try:
        return read_bundle_meta(path)
    except (CompatError, OSError, ValueError):
        return None


def _folder_meta(folder: Path) -> Any:
    from compat.embeddings.formats import DATASET_META

    try:
        return json.loads((folder / DATASET_META).read_text(encoding="utf-8")).get("meta")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return None


def gallery_owner(fmt: str, makers: tuple[str, ...] | None = None) -> Owns:
    """The ``owns`` test of a ``fmt`` gallery output (:func:`compat.outputs.check_owned`): a
    gallery whose meta names one of ``makers`` (default: any compat command of
    :data:`MAKERS`)."""
    from compat.embeddings.formats import DATASET_META, sidecar_of

    wanted = tuple(MAKERS.values()) if makers is None else makers
    by = "a compat command" if makers is None else " or ".join(wanted)

    def owns(path: Path) -> str | None:
        if fmt == "parquet":
            extra = folder_entries(
                path, lambda n: n == DATASET_META or bool(SHARD.fullmatch(n)), "a gallery's"
            )
            if extra is not None:
                return extra
            meta, record = _folder_meta(path), DATASET_META
        else:
            owner = sidecar_of(path) if fmt == "npy" else path
            if not owner.is_file():
                return f"a .npy without its sidecar {owner.name}: not a gallery {by} wrote"
            meta, record = _file_meta(owner), owner.name
        if maker(meta) not in wanted:
            return f"not a gallery {by} wrote ({record} records no such maker)"
        return None

    return owns


def claim_gallery(
    out: str | os.PathLike[str],
    fmt: str,
    option: str = "--out",
    makers: tuple[str, ...] | None = None,
) -> Path:
    """``out`` if a ``fmt`` gallery may be written there (module docstring); one-line errors
    otherwise, before any work. An ``.npy``'s sidecar is checked as well."""
    from compat.embeddings.formats import sidecar_of

    p = Path(out)
    kind = "folder" if fmt == "parquet" else "file"
    owns = gallery_owner(fmt, makers)
    if fmt == "npy":
        claim(sidecar_of(p), "file", option=option)
        if not os.path.lexists(p) and os.path.lexists(sidecar_of(p)):
            claim(sidecar_of(p), "file", gallery_owner("npz", makers), option, "a gallery")
    return claim(p, kind, owns, option, "a gallery")


def write_gallery(
    out: str | os.PathLike[str],
    n: int,
    dim: int,
    blocks: Iterable[tuple[int, np.ndarray]],
    *,
    ids: np.ndarray | None,
    labels: np.ndarray | None,
    row_versions: np.ndarray | None = None,
    version: str | None = None,
    fingerprint: str | None = None,
    meta: dict[str, Any] | None = None,
    option: str = "--out",
) -> Path:
    """``n`` rows of width ``dim`` (``blocks``: (first row, rows) in order) written as the
    gallery ``out`` names (:func:`compat.embeddings.formats.format_of`), through
    :func:`claim_gallery` and nothing half-written (module docstring). ``meta`` must name its
    maker (:data:`MAKERS`), so a later write may replace it."""
    from compat.embeddings.bundle import EmbeddingBundle, Sidecar, save_bundle, save_sidecar
    from compat.embeddings.formats import (
        format_of,
        sidecar_of,
        write_dataset_meta,
        write_npy_header,
        write_shard,
    )
    from compat.errors import BadInputError
    from compat.io import atomic_path

    path = Path(out)
    fmt = format_of(path)
    claim_gallery(path, fmt, option)
    info = dict(meta or {})
    if fmt == "npz":
        if labels is None:
            raise BadInputError(
                f"{path}: labels: an .npz gallery needs labels; these rows have none"
            )
        x = np.empty((n, dim), dtype=np.float32)
        for start, rows in blocks:
            x[start : start + len(rows)] = rows
        save_bundle(path, EmbeddingBundle(
            x, np.asarray(labels), ids=None if ids is None else [str(i) for i in ids],
            version=version, fingerprint=fingerprint,
            row_versions=None if row_versions is None else [str(v) for v in row_versions],
            meta=info,
        ))  # fmt: skip
        return path
    if fmt == "npy":
        # The matrix is renamed last: a failure leaves the old pair (or none), never a new
        # matrix beside an old sidecar.
        with atomic_path(path, size=128 + n * dim * 4) as tmp:
            with open(tmp, "wb") as f:
                write_npy_header(f, n, dim)
                for _, rows in blocks:
                    f.write(np.ascontiguousarray(rows, dtype=np.float32).data)
            save_sidecar(sidecar_of(path), Sidecar(
                labels=None if labels is None else np.asarray(labels),
                ids=None if ids is None else np.asarray(ids, dtype=np.str_),
                row_versions=None if row_versions is None else np.asarray(row_versions),
                version=version, fingerprint=fingerprint, meta=info,
            ))  # fmt: skip
        return path
    all_ids = np.asarray([str(i) for i in range(n)] if ids is None else ids, dtype=np.str_)
    with new_folder(path) as tmp:
        for k, (start, rows) in enumerate(blocks):
            stop = start + len(rows)
            write_shard(
                tmp / f"part-{k:06d}.parquet", all_ids[start:stop], rows,
                None if labels is None else np.asarray(labels)[start:stop],
                None if row_versions is None else np.asarray(row_versions)[start:stop],
            )  # fmt: skip
        write_dataset_meta(tmp, version, fingerprint, info)
    return path


__all__ = ["MAKERS", "SHARD", "claim_gallery", "gallery_owner", "maker", "write_gallery"]
