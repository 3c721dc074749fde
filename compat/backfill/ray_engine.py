"""The Ray Data engine of ``compat backfill --engine ray``: psi over Parquet shards with
``map_batches``, on a local Ray runtime or the cluster named by ``RAY_ADDRESS``.

What runs where: Ray reads the shards (``ray.data.read_parquet``), and tasks on every worker of the cluster
upgrade batches in parallel (:func:`_upgrade_batch`; each worker process loads psi once); this process receives the upgraded rows in order (``preserve_order``) and writes them
as the local engine does, one finished block of ``batch_size`` rows at a time
(:class:`compat.backfill.apply._Parts`). psi is applied by the same function as locally
(:func:`compat.backfill.apply.apply_psi`), so the output is identical to the local engine's.
Reading and psi scale with the workers; the ordered write is one stream at the driver.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

# psi per worker process, loaded by the first batch that worker upgrades (Ray reuses worker
# processes across tasks, so each loads psi once).
_PSI: dict[tuple[str, str], Any] = {}


def _upgrade_batch(batch: Any, psi_path: str, source: str, all_source: bool, device: str) -> Any:
    """A Ray Data task: psi applied to the rows of one batch that were made by ``source``."""
    import pyarrow as pa

    from compat.backfill.apply import apply_psi
    from compat.models.upgrade import FoldedUpgrade, load_upgrade

    key = (psi_path, device)
    if key not in _PSI:
        _PSI[key] = FoldedUpgrade(load_upgrade(Path(psi_path))[0], device)
    col = batch.column("embedding").combine_chunks()
    d = col.type.list_size
    x = np.ascontiguousarray(col.flatten().to_numpy(zero_copy_only=False), np.float32)
    x = x.reshape(-1, d)
    if "row_version" in batch.column_names:
        sel = np.asarray(batch.column("row_version").to_pylist(), dtype=np.str_) == source
    else:
        sel = np.full(len(x), all_source)
    y = x
    if sel.any():
        up = apply_psi(_PSI[key], x)
        y = up if sel.all() else np.where(sel[:, None], up, x)
    y = np.ascontiguousarray(y, dtype=np.float32)
    arr = pa.FixedSizeListArray.from_arrays(pa.array(y.ravel()), y.shape[1])
    return batch.set_column(batch.column_names.index("embedding"), "embedding", arr)


def upgrade_blocks(
    reader: Any, psi_path: Path, source: str, batch_size: int, done: set[int], device: str
) -> Iterator[tuple[int, Any, np.ndarray]]:
    """(batch number, block, upgraded rows) for every unfinished block of a Parquet gallery."""
    import ray

    from compat.embeddings.formats import Block

    if not ray.is_initialized():
        # RAY_ADDRESS names a cluster; without it a local runtime starts (and stops at exit).
        ray.init(address=os.environ.get("RAY_ADDRESS"), include_dashboard=False,
                 logging_level="ERROR", log_to_driver=False)  # fmt: skip
    ctx = ray.data.DataContext.get_current()
    ctx.execution_options.preserve_order = True
    ctx.enable_progress_bars = False
    cols = ["id", "embedding"] + [c for c in ("label", "row_version") if c in reader._columns]
    ds = ray.data.read_parquet([str(s) for s in reader.shards], columns=cols)
    ds = ds.map_batches(
        _upgrade_batch,
        fn_kwargs={
            "psi_path": str(psi_path),
            "source": source,
            "all_source": reader.version == source,
            "device": device,
        },
        batch_format="pyarrow",
        batch_size=batch_size,
        num_cpus=1,
    )
    start = 0
    for b, batch in enumerate(ds.iter_batches(batch_size=batch_size, batch_format="pyarrow")):
        n = batch.num_rows
        if b not in done:
            col = batch.column("embedding").combine_chunks()
            y = col.flatten().to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
            y = y.reshape(n, col.type.list_size)
            ids = np.asarray(batch.column("id").to_pylist(), dtype=np.str_)
            labels = batch.column("label").to_numpy() if "label" in cols else None
            yield b, Block(start, y, ids, None if labels is None else labels.astype(np.int64)), y
        start += n
