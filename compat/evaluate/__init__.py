"""Evaluation: embeddings in, compatibility matrix, intervals and update gain out.

One concept per module (import the module you need; this package imports nothing heavy):

* :mod:`~compat.evaluate.bundle`    embeddings + labels + provenance as a validated ``.npz``
* :mod:`~compat.evaluate.embed`     batched, L2-normalised embedding of images (torch)
* :mod:`~compat.evaluate.cache`     disk cache keyed by (weights sha256, data fingerprint, transform)
* :mod:`~compat.evaluate.search`    exact inner-product top-k and chunked score matrices
* :mod:`~compat.evaluate.metrics`   pure metric functions (CMC, mAP, mAP@k, TAR@FAR, TPIR@FPIR)
* :mod:`~compat.evaluate.protocols` identification / open-set / verification, built by name
* :mod:`~compat.evaluate.bootstrap` seeded, paired bootstrap over queries
* :mod:`~compat.evaluate.matrix`    M[q][g] cells, update gain (BCT Eq. 9), AC / AA / BC / FC
* :mod:`~compat.evaluate.report`    the chain evaluation and the files DVC reads
* :mod:`~compat.evaluate.runner`    embed every version through the cache, then report
* :mod:`~compat.evaluate.forward`   M(new, psi(old)) and the partial-backfill curve (BiCT)
* :mod:`~compat.evaluate.config`    the ``evaluate:`` section of params.yaml
"""
