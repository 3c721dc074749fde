"""Evaluation: protocols (pure metric functions over search results) and the evaluate stage's
reports.

One concept per module (import the module you need; this package imports nothing heavy):

* :mod:`compat.evaluate.metrics`      pure metric functions (CMC, mAP, mAP@k, TAR@FAR, TPIR@FPIR)
* :mod:`compat.evaluate.protocols`    identification / open-set / verification, built by name;
  ``evaluate_sets`` runs them on two labelled sets
* :mod:`compat.evaluate.ranking`      the gallery ranking identification and open-set share, and
  the per-class template gallery (d-Simplex/HOC, BCT's IJB-C protocols)
* :mod:`compat.evaluate.pairs`        verification pairs formed from labels, and their scores
* :mod:`compat.evaluate.manifest`     one matrix cell M(q, g) on the evaluation manifest
* :mod:`compat.evaluate.compared`     one metric of a comparison as JSON entries: the formatter
  of values, intervals, differences (BCT Eq. 2) and gains (BCT Eq. 9) the reports share
* :mod:`compat.evaluate.report`       the chain evaluation and the files DVC reads
* :mod:`compat.evaluate.runner`       embed every version through the cache, then report
* :mod:`compat.evaluate.forward`      M(new, psi(old)) and the partial-backfill curve (BiCT)
* :mod:`compat.evaluate.adapted`      M(adapt(new), old): a query adapter's cells (Drift-Adapter)
* :mod:`compat.evaluate.plots`        the one heat map (also the run page's), CMC and backfill
  images (matplotlib)
* :mod:`compat.evaluate.pick`         a method's weight picked on the validation set by the
  gate's lower bound (``python -m compat.evaluate.pick``)
* :mod:`compat.evaluate.environment`  the machine an evaluation ran on, recorded beside it
* :mod:`compat.evaluate.config`       the ``evaluate:`` section of params.yaml

Embedding, caching and search live in :mod:`compat.embeddings`; intervals, differences and
gains in :mod:`compat.compare` (the reports here are formatters over its engine).
"""
