"""Data: image sources, the embedded dataset, scenarios, splits and their expectations.

* :mod:`~compat.data.config`       the ``data:`` params section (embedded, folder or manifest source)
* :mod:`~compat.data.sources`      image sources: the embedded glyphs, an image folder, a CSV manifest
* :mod:`~compat.data.embedded`     the embedded default: kanji rendered offline from KanjiVG, cached
* :mod:`~compat.data.kanji`        KanjiVG's installed SVGs and their stroke paths
* :mod:`~compat.data.render`       one "handwritten" instance of a character
* :mod:`~compat.data.scenarios`    how each version's training set relates to its parent's
  (UniBCT Table 1, BCT, CL2R), with the relations the expectations check
* :mod:`~compat.data.split`        the ``split`` stage's work: training manifests and held-out sets
* :mod:`~compat.data.expectations` the data expectations of a split: validated with Great
  Expectations, the result and its Data Docs written (docs/data-expectations.md)
* :mod:`~compat.data.rows`         the split as one long frame of rows, what the expectations read
* :mod:`~compat.data.suite`        the expectation suite, generated from the split params and the
  scenarios' relations
* :mod:`~compat.data.gx_custom`    the GX expectations compat adds: rows compared with other rows
* :mod:`~compat.data.data_docs`    Data Docs of a validation, rendered for offline reading
* :mod:`~compat.data.transforms`   the one image -> tensor conversion of training and evaluation
"""
