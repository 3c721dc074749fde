"""Shared embedding infrastructure, used by evaluate, backfill, registry and the CLI (and
importing none of them).

One concept per module (importing this package loads nothing heavy; torch, faiss and pyarrow
are imported where they are used, and only :mod:`compat.embeddings.embed` needs torch to load):

* :mod:`compat.embeddings.bundle`   embeddings + labels + provenance as a validated ``.npz``
  (and the ``.npy`` matrix's sidecar)
* :mod:`compat.embeddings.cache`    disk cache keyed by (weights sha256, data fingerprint,
  transform)
* :mod:`compat.embeddings.embed`    batched, L2-normalised embedding of images over a manifest
  (torch)
* :mod:`compat.embeddings.versions` each version's embeddings through the cache, the model loaded
  only on a miss
* :mod:`compat.embeddings.formats`  the gallery formats (``.npz``, ``.npy`` + sidecar, Parquet
  shards, a LanceDB table): which a path names, and writing the files' pieces
* :mod:`compat.embeddings.gallery_out`  a file gallery written through compat's one
  checked-output path (:mod:`compat.outputs`): only a gallery a compat command wrote replaced,
  nothing half-written
* :mod:`compat.embeddings.reader`   reading a gallery of any format, in row blocks
  (``GalleryReader``) or whole (``load_gallery``)
* :mod:`compat.embeddings.search`   exact inner-product top-k and chunked score matrices
* :mod:`compat.embeddings.ann`      approximate nearest-neighbour indexes (faiss), built by name,
  and their recall against exact search
* :mod:`compat.embeddings.dims`     how a query meets a gallery of another width (``truncate`` or
  ``pad``)
* :mod:`compat.embeddings.mixed`    search a partially backfilled (mixed) gallery correctly
* :mod:`compat.embeddings.table`    a gallery as a LanceDB table (``<folder>/<name>.lance``): one
  row per item, one ``vec_<version>`` column per version; naming, metadata, checks, reading
* :mod:`compat.embeddings.table_columns`  a table's ``vec_<version>`` columns: naming, the
  metadata each records (version, width, weights, sources), their Arrow values as numpy rows
* :mod:`compat.embeddings.table_fill`  one vector column of a table filled in place (declared,
  then each fragment's file of that column swapped in one commit); the table's one-writer lock
* :mod:`compat.embeddings.table_write`  a table created (from a file gallery or ``compat
  embed``'s rows, atomically) and exported to a file gallery
* :mod:`compat.embeddings.table_search`  a table gallery scored as served, a partially
  backfilled one as the partial-backfill curve scores it
* :mod:`compat.embeddings.lock`     one writer at a time: the lock file a backfill's output and a
  table are written under (exit 6 for the second)

LanceDB (``lance``, ``lancedb``; the optional extra ``compat[lance]``) is imported where a table is
read or written, never on import; without it a table command is a usage error naming the extra.
"""
