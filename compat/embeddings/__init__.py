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
  shards): which a path names, and writing them
* :mod:`compat.embeddings.reader`   reading a gallery of any format, in row blocks
  (``GalleryReader``) or whole (``load_gallery``)
* :mod:`compat.embeddings.search`   exact inner-product top-k and chunked score matrices
* :mod:`compat.embeddings.ann`      approximate nearest-neighbour indexes (faiss), built by name,
  and their recall against exact search
* :mod:`compat.embeddings.dims`     how a query meets a gallery of another width (``truncate`` or
  ``pad``)
* :mod:`compat.embeddings.mixed`    search a partially backfilled (mixed) gallery correctly
"""
