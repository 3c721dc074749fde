"""Backfill: move stored gallery embeddings into a new version's space without the images.

One concept per module (this package imports nothing heavy):

* :mod:`~compat.backfill.config`  the ``upgrade:`` section of params.yaml (``UpgradeConfig``)
* :mod:`~compat.backfill.train`   fit psi on (parent, new) embeddings of the new training images
* :mod:`~compat.backfill.plan`    row versions and which rows a (partial) backfill upgrades
* :mod:`~compat.backfill.apply`   apply psi to a gallery bundle: batched, resumable, atomic
* :mod:`~compat.backfill.mixed`   search a partially backfilled (mixed) gallery correctly

The upgrade module itself is :mod:`compat.models.upgrade`.
"""
