"""The MLflow model registry as compat uses it, and the gate that moves ``production``
(docs/design.md, Registry conventions). mlflow is imported only where it is used.

One concept per module (importing this package loads nothing):

* :mod:`compat.registry.store`        :class:`~compat.registry.store.Registry`, the typed facade
  over ``MlflowClient`` (the only module that talks to MLflow's client): versions, tags, the
  ``production`` alias, retries and exit codes
* :mod:`compat.registry.embedded`     the embedded store's own files, without MLflow: the SQLite
  file checked, a ``sqlite:///`` folder checked, a copied store re-pointed (``relocate``) or
  read through a re-pointed scratch copy
* :mod:`compat.registry.reader`       the read-only registry the read commands use without
  mlflow: sqlite3, psycopg, the REST API
* :mod:`compat.registry.mlflow_tables` MLflow's registry tables as the reader's SQL reads them: the
  schema revisions compat knows, the queries, the snapshot
* :mod:`compat.registry.reader_rest`   the same read from an MLflow server's REST API
* :mod:`compat.registry.uris`         credentials hidden in every URI printed or recorded
* :mod:`compat.registry.register`     ``compat register``: a version's run and its registered
  model version
* :mod:`compat.registry.record`       what compat writes on a version's run: training history,
  verdict tags and metrics, plots and report artifacts
* :mod:`compat.registry.tags`         the verdict tags read back, typed (``compat.checks``,
  ``compat.gains``): a tag edited into something else named, exit 4
* :mod:`compat.registry.describe`     the version's description: the verdict written for people
* :mod:`compat.registry.run_page`     what a version's run page shows: the verdict paragraph,
  datasets, the verdict as an HTML page, tables and heatmaps
* :mod:`compat.registry.mlflow_model` a trained version's ``model/`` folder as a pickle-free
  MLflow model
* :mod:`compat.registry.pyfunc_model` the models-from-code file MLflow runs to load a version
* :mod:`compat.registry.integrity`    the sha256 of every file of that model, recorded at
  registration and checked before it is loaded (``compat verify --model``)
* :mod:`compat.registry.artifacts`    a registered version's artifacts: its kind, its registered
  weights digest, an artifact folder downloaded
* :mod:`compat.registry.promote`      ``compat promote``: load, check facts, judge, record,
  compare-and-set
* :mod:`compat.registry.rollback`     rollbacks: when a promotion is one, whose rows it must
  serve, the losses it accepts and the key a failed one must write
* :mod:`compat.registry.overlay`      versions read from files instead of the registry: a dry
  run's ``--local`` candidate, gated without being registered
* :mod:`compat.registry.unregister`   ``compat unregister``: a registration undone and logged
  (never one that is or was production)
* :mod:`compat.registry.assemble`     the embeddings a gate needs: the embedding cache, else the
  weights, else a registered bundle; the parent upgraded by psi
* :mod:`compat.registry.serving`      the rows a served configuration puts before the gate:
  adapted queries, a gallery map's rows
* :mod:`compat.registry.chain`        ``compat chain``: a version's lineage and every pair's
  recorded verdict
* :mod:`compat.registry.gallery`      the gallery a promotion serves, a LanceDB table: its rows
  checked against the gate, its version tagged and logged with the move, verified after
* :mod:`compat.registry.promotions`   the promotion lock and the append-only promotion log
  (JSON lines), and where the log says production is
* :mod:`compat.registry.log_line`     one line of that log, typed: what both storages hold, each
  line parsed when read and validated before it is written
* :mod:`compat.registry.shared`       the same lock and log in a shared server's PostgreSQL
  database
* :mod:`compat.registry.drift`        the ``production`` alias disagreeing with the promotion
  log: warned about, and ``compat verify``
* :mod:`compat.registry.recovery`     what a killed promotion leaves, found and repaired
"""
