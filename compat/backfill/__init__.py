"""Backfill: move stored gallery embeddings into a new version's space without the images.

One concept per module (this package imports nothing heavy):

* :mod:`~compat.backfill.plan`    row versions and which rows a (partial) backfill upgrades
* :mod:`~compat.backfill.apply`   apply psi to a stored gallery: streamed, resumable, atomic
* :mod:`~compat.backfill.engines` where psi runs: this process or Ray tasks (a parameter of
  the one loop in ``apply``)

The maps a backfill applies (psi, :mod:`compat.maps.psi`, fitted by :mod:`compat.maps.psi_fit`,
or a :mod:`compat.maps` gallery map) are opened by :func:`compat.maps.open_map`; searching a partially backfilled gallery is
:mod:`compat.embeddings.mixed`.
"""
