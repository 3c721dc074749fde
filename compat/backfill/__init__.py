"""Backfill: move stored gallery embeddings into a new version's space without the images.

One concept per module (this package imports nothing heavy):

* :mod:`compat.backfill.plan`    row versions and which rows a (partial) backfill upgrades
* :mod:`compat.backfill.apply`   the one backfill loop: a map over a stored gallery, streamed
  in blocks, resumable, atomic
* :mod:`compat.backfill.engines` where the map runs: this process or Ray tasks (a parameter of
  the one loop in ``apply``)
* :mod:`compat.backfill.output`  the output (``--out``): whether a run may write it (apart
  from the input, written by a backfill, room on disk), the one-writer lock, and putting the
  finished output in place (assembled from the saved blocks, a folder swapped in)
* :mod:`compat.backfill.resume`  the work folder beside the output: finished blocks saved with
  their sha256, the job they belong to, and which of them a rerun skips
* :mod:`compat.backfill.table`   a LanceDB table gallery backfilled in place: ``vec_<to>`` added
  or filled further, fragment by fragment (this process or Ray tasks), resumable, one commit
* :mod:`compat.backfill.progress` the progress bar both backfills draw on stderr

The maps a backfill applies (psi, :mod:`compat.maps.psi`, fitted by :mod:`compat.maps.psi_fit`,
or a :mod:`compat.maps` gallery map) are opened by :func:`compat.maps.open_map`; searching a
partially backfilled gallery is :mod:`compat.embeddings.mixed`.
"""
