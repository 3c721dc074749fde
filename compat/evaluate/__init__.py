"""Evaluation: protocols (pure metric functions over search results) and the evaluate stage's
reports.

One concept per module (import the module you need; this package imports nothing heavy):

* :mod:`~compat.evaluate.metrics`   pure metric functions (CMC, mAP, mAP@k, TAR@FAR, TPIR@FPIR)
* :mod:`~compat.evaluate.protocols` identification / open-set / verification, built by name
* :mod:`~compat.evaluate.report`    the chain evaluation and the files DVC reads
* :mod:`~compat.evaluate.runner`    embed every version through the cache, then report
* :mod:`~compat.evaluate.forward`   M(new, psi(old)) and the partial-backfill curve (BiCT)
* :mod:`~compat.evaluate.plots`     heatmaps, CMC and backfill images (matplotlib)
* :mod:`~compat.evaluate.config`    the ``evaluate:`` section of params.yaml

Embedding, caching and search live in :mod:`compat.embeddings`; intervals, differences and
gains in :mod:`compat.compare` (the reports here are formatters over its engine).
"""
