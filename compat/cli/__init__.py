"""The ``compat`` command line: one typer app (:mod:`compat.cli.main`), one module per command
group; torch, mlflow and faiss are imported inside commands so ``compat --help`` stays fast.

* :mod:`compat.cli.main`           the app, ``--version``, and every command group registered
* :mod:`compat.cli.common`         shared plumbing: errors as one line and an exit code, MLflow
  kept quiet, the project test, help that shows boolean flags as flags
* :mod:`compat.cli.output`         what commands print: tables and messages, JSON, the CI step
  summary
* :mod:`compat.cli.registry`       what the registry commands share: the registry a command
  names, ``--registry-uri`` and ``--json``, the missing-store test, drift warnings, the checks
  table
* :mod:`compat.cli.registry_write` ``compat register`` and ``compat promote``: the commands that
  write the registry
* :mod:`compat.cli.registry_read`  ``compat versions``, ``show``, ``chain``, ``log`` and
  ``verify``: the commands that read it
* :mod:`compat.cli.contract`       ``compat contract validate``: every problem of a contract file
* :mod:`compat.cli.data`           ``compat data``: the image source the data stage produced
* :mod:`compat.cli.score`          ``compat score``: evaluation protocols on your own embeddings
* :mod:`compat.cli.score_queries`  the query rows ``compat score --query-adapter`` serves: a
  query adapter's, or a query blend's with the old model's rows of the queries (``--old-query``)
* :mod:`compat.cli.backfill`       ``compat backfill``: a stored gallery upgraded into a new
  version's space
* :mod:`compat.cli.maps`           ``compat adapt`` (fit a query adapter) and ``compat embed`` (a
  version's embeddings through the cache)
"""
