"""Shared embedding infrastructure, used by evaluate, backfill, registry and the CLI (and
importing none of them).

One concept per module (this package imports nothing heavy):

* :mod:`~compat.embeddings.bundle` embeddings + labels + provenance as a validated ``.npz``
* :mod:`~compat.embeddings.cache`  disk cache keyed by (weights sha256, data fingerprint, transform)
* :mod:`~compat.embeddings.embed`  batched, L2-normalised embedding of images over a manifest (torch)
* :mod:`~compat.embeddings.search` exact inner-product top-k and chunked score matrices
* :mod:`~compat.embeddings.mixed`  search a partially backfilled (mixed) gallery correctly
"""
