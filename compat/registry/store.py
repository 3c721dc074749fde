"""The MLflow model registry as compat uses it (docs/design.md, Registry conventions).

One registered model (default ``compat``) holds every version; a compat version name (``v2``) is
the tag ``compat.version`` on an MLflow model version, because MLflow reserves ``v<N>`` aliases.
The serving version is the alias ``production``. Weights are plain artifacts (safetensors + card),
never pickled models.

The default store is ``sqlite:///<abs>/registry/mlflow.db`` with artifacts in
``registry/artifacts``; ``MLFLOW_TRACKING_URI`` selects a shared server instead, and
``COMPAT_REGISTRY_DATABASE`` names the PostgreSQL database behind that server, where the
promotion lock and log then live (:mod:`compat.registry.shared`). The embedded store's own
files (whether ``mlflow.db`` is a usable SQLite store, a copied store re-pointed at its own
``registry/artifacts``, the read-only scratch copy) are :mod:`compat.registry.embedded`'s; this
module is the only one that talks to MLflow's client. mlflow is imported lazily: ``import
mlflow`` costs over a second and ``compat --help`` must stay fast.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.errors import (
    BadInputError,
    CompatError,
    ConflictError,
    InfrastructureError,
    NotFoundError,
)
from compat.names import name_problem
from compat.registry.embedded import (
    EXPERIMENT,
    check_sqlite_folder,
    check_writable,
    readable_uri,
    relocate,
    store_exists,
)
from compat.registry.uris import first_line, mask

TAG_PREFIX = "compat."
VERSION_TAG = "compat.version"
PRODUCTION = "production"
DEFAULT_MODEL = "compat"
# The PostgreSQL database of a shared mlflow server's backend store (its --backend-store-uri).
DATABASE_ENV = "COMPAT_REGISTRY_DATABASE"
LOCAL_LOCK_ENV = "COMPAT_LOCAL_LOCK"  # 1: a remote server locked per machine (one writer place)
REMOTE_SCHEMES = ("http://", "https://", "databricks")
# Write conflicts from a shared server (concurrent tag upserts hit a unique violation) are
# retried this many times with exponential backoff, then reported as a conflict (exit 6).
CONFLICT_RETRIES = 6
CONFLICT_MARKERS = ("unique violation", "uniqueviolation", "duplicate key value", "integrityerror")


def check_version_name(name: str) -> str:
    """``name`` if it is a valid version name (:mod:`compat.names`), else BadInputError (exit 4)."""
    problem = name_problem(name)
    if problem:
        raise BadInputError(f"version {problem}")
    return name


def is_conflict(err: BaseException) -> bool:
    """A write that lost a race on the server (a unique violation), not an outage."""
    text = str(err).lower()
    return any(marker in text for marker in CONFLICT_MARKERS)


@dataclass
class VersionRecord:
    """One registered compat version, as read back from the registry."""

    name: str
    mlflow_version: str
    run_id: str | None
    source: str
    tags: dict[str, str] = field(default_factory=dict)
    description: str = ""
    aliases: list[str] = field(default_factory=list)
    created: int = 0

    @property
    def status(self) -> str:
        return self.tags.get("compat.status", "candidate")

    @property
    def parent(self) -> str | None:
        p = self.tags.get("compat.parent", "")
        return p or None


def _quiet_mlflow_env() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # Fail fast on an unreachable server: the gate must answer with exit code 5, not hang.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


class Registry:
    """A thin, typed wrapper over ``MlflowClient`` speaking compat's vocabulary.

    ``read_only``: the registry is only read (``versions``, ``show``, ``chain``, ``log``,
    ``verify``), so a folder the user cannot write to serves as well: nothing is created
    (no folder, experiment or registered model), the embedded database is opened read-only,
    a copied store is re-pointed at its own artifacts in a scratch copy
    (:func:`compat.registry.embedded.readable_uri`),
    and the promotion log is read without its lock. Every URI this class prints is
    :attr:`safe_uri`, credentials hidden (:mod:`compat.registry.uris`)."""

    def __init__(
        self,
        uri: str | None = None,
        root: str | os.PathLike[str] = "registry",
        model: str = DEFAULT_MODEL,
        read_only: bool = False,
    ) -> None:
        self.root = Path(root).resolve()
        self.uri = (
            uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.root / 'mlflow.db'}"
        )
        self.model = model
        self.read_only = read_only
        # the URI MLflow is given: ``uri``, or a read-only form of the embedded store (_connect)
        self.tracking_uri = self.uri
        self._client: Any = None
        self._ledger: Any = None
        self._no_model = False  # read-only: the registered model does not exist (yet)

    @property
    def safe_uri(self) -> str:
        """The URI as compat prints and records it: credentials hidden."""
        return mask(self.uri)

    @property
    def is_local(self) -> bool:
        return self.uri.startswith("sqlite:///") and self.uri.endswith(str(self.root / "mlflow.db"))

    @property
    def database(self) -> str | None:
        """The PostgreSQL URL of the shared backend, if there is one.

        The tracking URI itself when it is a ``postgresql://`` URL (MLflow talking to the
        database directly), else ``COMPAT_REGISTRY_DATABASE`` (the server's
        ``--backend-store-uri``) unless the registry is the embedded default."""
        if self.uri.startswith(("postgresql://", "postgresql+", "postgres://")):
            return self.uri  # the registry's own database
        env = os.environ.get(DATABASE_ENV)
        if env and not self.is_local:
            return env
        return None

    def ledger(self) -> Any:
        """The promotion lock and log: in the shared PostgreSQL database when there is one,
        else ``registry/promotions.jsonl`` under a file lock."""
        if self._ledger is None:
            db = self.database
            if db is not None:
                from compat.registry.shared import PostgresLedger

                self._ledger = PostgresLedger(db, self.model)
            else:
                from compat.registry.promotions import PromotionLog

                self._ledger = PromotionLog(self.root, unshared=self._unshared_lock())
        return self._ledger

    def _unshared_lock(self) -> str | None:
        """Why this machine's file lock cannot serialise writes to this registry (a remote
        server that other machines also write, with no shared database named), unless the
        user chose a per-machine lock (``COMPAT_LOCAL_LOCK=1``: promote from one place only)."""
        if not self.uri.startswith(REMOTE_SCHEMES) or os.environ.get(LOCAL_LOCK_ENV) == "1":
            return None
        return (
            f"{self.safe_uri} is a remote server and {DATABASE_ENV} is not set: this "
            "machine's lock and log would not stop another machine's promotion or registration "
            f"(two logs, one alias); set {DATABASE_ENV} to the server's PostgreSQL "
            f"--backend-store-uri, or {LOCAL_LOCK_ENV}=1 to lock on this machine only (then "
            "promote and register from one place only)"
        )

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def local_store_exists(self, wait: bool = True) -> bool:
        """Whether the embedded store (``registry/mlflow.db``) exists; False where nothing is
        there yet, exit 5 naming a damaged one (:func:`compat.registry.embedded.store_exists`)."""
        return store_exists(self.root, wait)

    def _connect(self) -> Any:
        _quiet_mlflow_env()
        from filelock import FileLock

        schema_lock: Any = contextlib.nullcontext()
        if self.is_local and self.read_only:
            if not self.local_store_exists():  # a damaged one: exit 5, naming it
                raise NotFoundError(f"{self.root / 'mlflow.db'}: no registry yet")
            if os.access(self.root, os.W_OK):
                # a store another process is still creating is read after it, never half-made;
                # a folder nobody can write to has no creator (and no lock file is made there)
                schema_lock = FileLock(str(self.root / ".schema.lock"), timeout=300)
        elif self.is_local:
            if self.root.exists() and not self.root.is_dir():
                self.local_store_exists()  # names it: exit 5
            check_writable(self.root)
            # Several processes touching a fresh sqlite store at once race on MLflow's schema
            # migration; a file lock serialises first use (and the relocation below).
            schema_lock = FileLock(str(self.root / ".schema.lock"), timeout=300)
        elif self.uri.startswith(("postgresql://", "postgresql+", "postgres://")):
            from compat.registry.shared import check_reachable, with_connect_timeout

            check_reachable(self.uri)  # at once, not after MLflow's ten retries
            self.tracking_uri = with_connect_timeout(self.uri)  # and every later connection
        elif self.uri.startswith("sqlite:"):
            db = check_sqlite_folder(self.uri)
            if db is not None and not (self.read_only and not os.access(db.parent, os.W_OK)):
                schema_lock = FileLock(f"{db}.schema.lock", timeout=300)
            if db is not None and self.read_only and db.is_file() and "?" not in self.uri:
                from urllib.parse import quote

                self.tracking_uri = f"sqlite:///file:{quote(str(db))}?mode=ro&uri=true"
        try:
            import mlflow
            from mlflow import MlflowClient

            with schema_lock:
                # a damaged store is exit 5, never replaced (checked under the lock: a store
                # another process is creating is never mistaken for a damaged one)
                if self.is_local and self.read_only:
                    self.tracking_uri = readable_uri(self.root)
                elif self.is_local and self.local_store_exists(wait=False):
                    relocate(self.root / "mlflow.db", (self.root / "artifacts").as_uri())
                _set_uris(mlflow, self.tracking_uri)
                client = MlflowClient(self.tracking_uri, self.tracking_uri)
                if self.read_only:  # nothing created: a model not there yet has no versions
                    found = client.search_registered_models(f"name = '{self.model}'")
                    self._no_model = len(found) == 0
                    return client
                if client.get_experiment_by_name(EXPERIMENT) is None:
                    location = (self.root / "artifacts").as_uri() if self.is_local else None
                    try:
                        client.create_experiment(EXPERIMENT, artifact_location=location)
                    except Exception:  # another process created it between our check and create
                        if client.get_experiment_by_name(EXPERIMENT) is None:
                            raise
                try:
                    client.get_registered_model(self.model)
                except Exception:
                    try:
                        client.create_registered_model(
                            self.model,
                            description="Embedding model versions gated by compat contracts.",
                        )
                    except Exception:
                        client.get_registered_model(self.model)
        except CompatError:  # already one line naming what is wrong (a damaged store)
            raise
        except Exception as err:  # MLflow raises many types for "cannot reach the store"
            schema = _schema_advice(err)
            if schema is not None:
                raise InfrastructureError(f"registry {self.safe_uri}: {schema}") from None
            raise InfrastructureError(
                f"registry {self.safe_uri} is unreachable: {_short(err)}"
            ) from None
        return client

    def call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        """Call an MlflowClient method; connection failures become InfrastructureError (exit 5).

        A write conflict (a unique violation on the server: its tag and alias upserts are not
        safe under concurrent writers) is retried with exponential backoff and jitter; if it
        persists it is a ConflictError (exit 6), never "unreachable"."""
        for attempt in range(CONFLICT_RETRIES + 1):
            try:
                return getattr(self.client, fn)(*args, **kwargs)
            except CompatError:  # already one line with its exit code (e.g. from _connect)
                raise
            except Exception as err:
                if is_conflict(err):
                    if attempt < CONFLICT_RETRIES:
                        time.sleep(0.05 * 2**attempt * (1 + random.random()))
                        continue
                    raise ConflictError(
                        f"registry {self.safe_uri}: {fn}: a concurrent write kept conflicting after "
                        f"{CONFLICT_RETRIES} retries: {_short(err)}"
                    ) from None
                full = self._storage_error(err)
                if full is not None:
                    raise full from None
                from mlflow.exceptions import MlflowException

                code = getattr(err, "error_code", "") if isinstance(err, MlflowException) else ""
                if code == "RESOURCE_DOES_NOT_EXIST":
                    raise NotFoundError(f"registry {self.safe_uri}: {fn}: {_short(err)}") from None
                if code == "INVALID_PARAMETER_VALUE":
                    raise BadInputError(f"registry {self.safe_uri}: {fn}: {_short(err)}") from None
                raise InfrastructureError(
                    f"registry {self.safe_uri}: {fn} failed: {_short(err)}"
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _storage_error(self, err: BaseException) -> CompatError | None:
        """A full disk, spent quota or read-only file system under the store, as the one-line
        StorageError every file writer gives (exit 5): SQLite says it in words ("database or
        disk is full"), an artifact copy as an OSError."""
        from compat.io import storage_error

        db = self.root / "mlflow.db" if self.is_local else None
        text = str(err).lower()
        if db is not None and ("database or disk is full" in text or "readonly database" in text):
            code = errno.ENOSPC if "full" in text else errno.EROFS
            return storage_error(OSError(code, os.strerror(code)), db)
        cause: BaseException | None = err
        while cause is not None:  # MLflow wraps the OSError of a failed artifact copy
            if isinstance(cause, OSError):
                return storage_error(cause, getattr(cause, "filename", None) or self.root)
            cause = cause.__cause__ or cause.__context__
        return None

    @property
    def experiment_id(self) -> str:
        return self.call("get_experiment_by_name", EXPERIMENT).experiment_id

    def run_url(self, run_id: str | None) -> str | None:
        """The MLflow UI page of a run on an ``http(s)://`` tracking server (credentials
        hidden); None for a store that no browser reaches by URL (sqlite, a database)."""
        if not run_id or not self.uri.startswith(("http://", "https://")):
            return None
        try:
            experiment = self.call("get_run", run_id).info.experiment_id
        except CompatError:  # a link is a courtesy: never fail a gate for it
            return None
        return f"{self.safe_uri.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}"

    # --- versions -------------------------------------------------------------------------

    def _record(self, mv: Any) -> VersionRecord:
        return VersionRecord(
            name=mv.tags.get(VERSION_TAG, f"mlflow-{mv.version}"),
            mlflow_version=str(mv.version),
            run_id=mv.run_id,
            source=mv.source,
            tags=dict(mv.tags),
            description=mv.description or "",
            aliases=list(getattr(mv, "aliases", []) or []),
            created=int(mv.creation_timestamp or 0),
        )

    def versions(self) -> list[VersionRecord]:
        """Every registered compat version, oldest first (search returns no aliases)."""
        mvs = self.call("search_model_versions", f"name='{self.model}'")
        records = [self._record(mv) for mv in mvs if VERSION_TAG in mv.tags]
        prod = self.production_mlflow_version()
        for r in records:
            r.aliases = [PRODUCTION] if r.mlflow_version == prod else []
        return sorted(records, key=lambda r: int(r.mlflow_version))

    def find(self, version: str) -> VersionRecord | None:
        check_version_name(version)
        mvs = self.call(
            "search_model_versions", f"name='{self.model}' and tags.`{VERSION_TAG}`='{version}'"
        )
        if not mvs:
            return None
        newest = max(mvs, key=lambda mv: int(mv.version))
        return self._record(self.call("get_model_version", self.model, newest.version))

    def get(self, version: str) -> VersionRecord:
        rec = self.find(version)
        if rec is None:
            raise NotFoundError(
                f"version {version!r} is not registered in {self.safe_uri} (run: compat register {version})"
            )
        return rec

    def set_tags(self, rec: VersionRecord, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.call("set_model_version_tag", self.model, rec.mlflow_version, key, str(value))
            rec.tags[key] = str(value)

    def delete_tags(self, rec: VersionRecord, keys: list[str]) -> None:
        """Remove tags ``keys`` from the version (those it holds; a missing one is no error)."""
        for key in keys:
            if key in rec.tags:
                self.call("delete_model_version_tag", self.model, rec.mlflow_version, key)
                del rec.tags[key]

    def set_description(self, rec: VersionRecord, text: str) -> None:
        self.call("update_model_version", self.model, rec.mlflow_version, description=text)

    def delete_version(self, rec: VersionRecord) -> None:
        """Delete the registered model version (``compat unregister``); its run stays."""
        self.call("delete_model_version", self.model, rec.mlflow_version)

    # --- the production alias ---------------------------------------------------------------

    def production_mlflow_version(self) -> str | None:
        """The MLflow version the ``production`` alias points at; None only when it is unset.

        The registered model's alias map is read, which is simply empty when no alias is set:
        a store that cannot be read raises (InfrastructureError, exit 5) and is never taken
        for "unset" (MLflow raises the same exception type for a locked sqlite store as for a
        missing alias, so reading the alias itself could not tell the two apart).
        """
        if self.client is not None and self._no_model:  # read-only, nothing registered yet
            return None
        aliases = self.call("get_registered_model", self.model).aliases or {}
        version = aliases.get(PRODUCTION)
        return None if version is None else str(version)

    def production(self) -> str | None:
        """The compat version the ``production`` alias points at, or None."""
        mv = self.production_mlflow_version()
        if mv is None:
            return None
        return self.call("get_model_version", self.model, mv).tags.get(VERSION_TAG)

    def set_production(self, rec: VersionRecord) -> None:
        self.call("set_registered_model_alias", self.model, PRODUCTION, rec.mlflow_version)


def _set_uris(mlflow: Any, uri: str) -> None:
    """Point mlflow's fluent API at ``uri`` without leaving it in ``os.environ``: mlflow's
    setters export ``MLFLOW_TRACKING_URI``, which would then name this store for every later
    Registry (the CLI reads that variable) and every subprocess, even in another project."""
    saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    try:
        mlflow.set_tracking_uri(uri)
        mlflow.set_registry_uri(uri)
        # mlflow caches artifact repositories by run id, process-wide: a copied store has the
        # same run ids with other artifact folders, so a cache filled by another store is wrong.
        from mlflow.tracking._tracking_service import utils

        cache = getattr(utils, "_artifact_repos_cache", None)
        if cache is not None:
            cache.clear()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


_SCHEMA = re.compile(r"found version (\w+), but expected (\w+)")


def _schema_advice(err: BaseException) -> str | None:
    """MLflow's refusal of a database at a schema revision it does not read, as one line with
    MLflow's own advice (``mlflow db upgrade``), or None for any other error."""
    text = str(err)
    if "database schema" not in text and "Can't locate revision" not in text:
        return None
    from importlib.metadata import version as installed

    found = _SCHEMA.search(text)
    revisions = (
        f"revision {found.group(1)}; this MLflow's is {found.group(2)}" if found else _short(err)
    )
    return (
        f"MLflow {installed('mlflow')} cannot read this database's schema ({revisions}): take a "
        "backup, then run 'mlflow db upgrade <database_uri>', or use the MLflow release that "
        "wrote it"
    )


def tag_key(*parts: str) -> str:
    """A tag key from metric names: MLflow keys allow no ``@`` or ``=`` (tar@far=0.1 -> tar/far:0.1)."""
    return ".".join(p.replace("@", "/").replace("=", ":") for p in parts)


def _short(err: BaseException) -> str:
    """The first line of an error (MLflow's may repeat the URI: credentials hidden)."""
    return first_line(err)
