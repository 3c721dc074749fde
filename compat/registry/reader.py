"""The registry read without mlflow: what ``versions``, ``show``, ``chain``, ``log``, ``verify``
and ``promote --dry-run`` need, in a fraction of ``import mlflow``'s time and memory.

``import mlflow`` costs 1.5-2.5 s and 170 MB on a small machine, its SQLAlchemy store another
0.8 s; the read commands need four facts: whether the registered model exists, its versions
(number, run, source, description, creation time, tags), and its aliases. :class:`RegistryReader`
reads them from the three backends compat supports, in one snapshot per command:

- the SQLite file of the embedded store (or a ``sqlite:///`` URI): stdlib :mod:`sqlite3`,
  opened ``mode=ro`` (a read-only folder serves; nothing is created);
- a PostgreSQL database named as the tracking URI: :mod:`psycopg` with ``connect_timeout``,
  the same SQL;
- an ``http(s)://`` MLflow server: its REST API (``/api/2.0/mlflow/...``), with the bounded
  timeout MLflow's own client is given (``MLFLOW_HTTP_REQUEST_TIMEOUT``, no retries).

The SQL reads MLflow's tables directly, so it is tied to their schema: it reads a database
whose ``alembic_version`` is one of :data:`KNOWN_SCHEMAS` (every revision of the MLflow releases
compat supports, 3.9 to 3.18; the registry tables changed once in between, when they gained a
``workspace`` column), and :func:`open_registry` hands any other database to MLflow's own client:
correct first, fast where it can be. A revision MLflow cannot read either gets MLflow's own advice
(``mlflow db upgrade``) in one line, exit 5. Every other URI (``databricks``, ``mysql://``,
``file:``) is read through MLflow too. The answers equal ``MlflowClient``'s:
``tests/registry/test_reader.py`` compares them on a registry written by the normal path, with
the installed MLflow, and ``tests/registry/test_mlflow_releases.py`` (slow) with the oldest and
the newest release of pyproject.toml's range.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any
from urllib.parse import quote

from compat.errors import CompatError, InfrastructureError, NotFoundError
from compat.registry.embedded import (
    SQLITE_BUSY_TIMEOUT_S,
    check_sqlite_folder,
    readable_uri,
    stale_location,
)
from compat.registry.mlflow_tables import (
    HAS_WORKSPACE,
    KNOWN_SCHEMAS,
    Snapshot,
    query_snapshot,
    schema_problem,
)
from compat.registry.reader_rest import RestSource
from compat.registry.store import (
    DEFAULT_MODEL,
    PRODUCTION,
    VERSION_TAG,
    Registry,
    VersionRecord,
    check_version_name,
)
from compat.registry.uris import first_line

_UNREAD = object()  # no database file to read a schema revision from
POSTGRES_SCHEMES = ("postgresql://", "postgresql+", "postgres://")


def fast_readable(uri: str) -> bool:
    """Whether :class:`RegistryReader` reads this tracking URI (else MLflow does)."""
    if uri.startswith(("http://", "https://")) or uri.startswith(POSTGRES_SCHEMES):
        return True
    # a plain sqlite file; an in-memory database or a URI with options is MLflow's to read
    rest = uri.removeprefix("sqlite:///")
    return uri.startswith("sqlite:///") and "?" not in rest and rest not in ("", ":memory:")


def open_registry(uri: str | None, root: str | os.PathLike[str] = "registry") -> Registry:
    """The registry a read-only command reads: :class:`RegistryReader` for the backends it
    speaks at a schema it knows, else MLflow's own client (``Registry(read_only=True)``):
    correct first (MLflow reads what its release wrote, or says ``mlflow db upgrade``), fast
    where the reader can be."""
    reader = RegistryReader(uri=uri, root=root)
    if fast_readable(reader.uri) and reader.knows_schema():
        return reader
    return Registry(uri=uri, root=root, read_only=True)


class RegistryReader(Registry):
    """:class:`compat.registry.store.Registry`'s read methods without mlflow.

    Always read-only: a method that would write (``set_tags``, ``set_production``, any
    ``call``) raises. Where a caller still needs MLflow (downloading an artifact),
    :attr:`tracking_uri` names the store as the read-only Registry would (a re-pointed scratch
    copy for a copied embedded store), and MLflow is pointed at it then, not before."""

    def __init__(
        self,
        uri: str | None = None,
        root: str | os.PathLike[str] = "registry",
        model: str = DEFAULT_MODEL,
    ) -> None:
        super().__init__(uri=uri, root=root, model=model, read_only=True)
        self._snapshot: Snapshot | None = None
        self._mlflow_uri: str | None = None

    # --- what MLflow would be given ---------------------------------------------------------

    @property  # type: ignore[override]
    def tracking_uri(self) -> str:
        """The URI MLflow reads this store through (computed, and MLflow pointed at it, on
        first use: only a caller about to use MLflow asks)."""
        if self._mlflow_uri is None:
            uri = self.uri
            if self.is_local:
                uri = readable_uri(self.root)
            elif uri.startswith("sqlite:///"):
                db = check_sqlite_folder(uri)
                if db is not None and db.is_file() and "?" not in uri:
                    uri = f"sqlite:///file:{quote(str(db))}?mode=ro&uri=true"
            import mlflow

            from compat.registry.store import _quiet_mlflow_env, _set_uris

            _quiet_mlflow_env()
            _set_uris(mlflow, uri)
            self._mlflow_uri = uri
        return self._mlflow_uri

    @tracking_uri.setter
    def tracking_uri(self, value: str) -> None:  # Registry.__init__ sets it: computed here
        pass

    @property
    def client(self) -> Any:
        raise InfrastructureError(f"registry {self.safe_uri}: read-only reader has no client")

    def call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        raise InfrastructureError(f"registry {self.safe_uri}: {fn}: the registry is read-only")

    # --- reads ------------------------------------------------------------------------------

    def knows_schema(self) -> bool:
        """Whether the database's MLflow schema revision is one of :data:`KNOWN_SCHEMAS` (an
        http(s) server: always, its REST API is stable). A database that cannot be read, or is
        not there, counts as known: the reader then reports it as it does today."""
        if self.uri.startswith(("http://", "https://")):
            return True
        try:
            revision = self._revision()
        except Exception:  # unreachable, damaged, missing: the snapshot names what is wrong
            return True
        return revision is _UNREAD or revision in KNOWN_SCHEMAS

    def _revision(self) -> object:
        """The database's ``alembic_version``, None without one, :data:`_UNREAD` where there is
        no database to read."""
        if self.uri.startswith(POSTGRES_SCHEMES):
            from compat.registry.shared import CONNECT_TIMEOUT_S, plain_url, psycopg_module

            psycopg = psycopg_module()
            with psycopg.connect(plain_url(self.uri), connect_timeout=CONNECT_TIMEOUT_S) as con:
                row = con.execute("SELECT version_num FROM alembic_version").fetchone()
                return row[0] if row else None
        import sqlite3

        db = self.root / "mlflow.db" if self.is_local else check_sqlite_folder(self.uri)
        if db is None or not os.path.isfile(db):
            return _UNREAD
        con = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute("SELECT version_num FROM alembic_version").fetchone()
            return row[0] if row else None
        finally:
            con.close()

    def snapshot(self) -> Snapshot:
        """The registered model, its versions and aliases, read once per reader."""
        if self._snapshot is None:
            if self.uri.startswith(("http://", "https://")):
                self._snapshot = RestSource(self).read()
            elif self.uri.startswith(POSTGRES_SCHEMES):
                self._snapshot = _postgres_snapshot(self)
            else:
                self._snapshot = _sqlite_snapshot(self)
        return self._snapshot

    def versions(self) -> list[VersionRecord]:
        """Every registered compat version, oldest first, as :meth:`Registry.versions`."""
        snap = self.snapshot()
        prod = snap.aliases.get(PRODUCTION)
        out = []
        for rec in snap.versions:
            if VERSION_TAG in rec.tags:
                copy = _copy(rec)
                copy.aliases = [PRODUCTION] if rec.mlflow_version == prod else []
                out.append(copy)
        return out

    def find(self, version: str) -> VersionRecord | None:
        """The newest MLflow version tagged ``version``, with its aliases; None if none."""
        check_version_name(version)
        snap = self.snapshot()
        found = [r for r in snap.versions if r.tags.get(VERSION_TAG) == version]
        if not found:
            return None
        rec = _copy(found[-1])
        rec.aliases = [a for a, v in snap.aliases.items() if v == rec.mlflow_version]
        return rec

    def production_mlflow_version(self) -> str | None:
        return self.snapshot().aliases.get(PRODUCTION)

    def production(self) -> str | None:
        mv = self.production_mlflow_version()
        if mv is None:
            return None
        for rec in self.snapshot().versions:
            if rec.mlflow_version == mv:
                return rec.tags.get(VERSION_TAG)
        return None

    def run_url(self, run_id: str | None) -> str | None:
        """As :meth:`Registry.run_url`: a server's run page, else None."""
        if not run_id or not self.uri.startswith(("http://", "https://")):
            return None
        try:
            body = RestSource(self).get("runs/get", {"run_id": run_id})
            experiment = body["run"]["info"]["experiment_id"]
        except (CompatError, KeyError, TypeError):  # a link is a courtesy
            return None
        return f"{self.safe_uri.rstrip('/')}/#/experiments/{experiment}/runs/{run_id}"


def _copy(rec: VersionRecord) -> VersionRecord:
    return VersionRecord(
        name=rec.name,
        mlflow_version=rec.mlflow_version,
        run_id=rec.run_id,
        source=rec.source,
        tags=dict(rec.tags),
        description=rec.description,
        aliases=list(rec.aliases),
        created=rec.created,
    )


def _sqlite_snapshot(reader: RegistryReader) -> Snapshot:
    """Read the SQLite file read-only; a store another process is creating is read after it
    (its schema lock), a damaged one is exit 5 naming it, a missing one has nothing."""
    import sqlite3

    lock: Any = contextlib.nullcontext()
    if reader.is_local:
        db = reader.root / "mlflow.db"
        if not reader.local_store_exists():
            raise NotFoundError(f"{db}: no registry yet")
        if os.access(reader.root, os.W_OK):
            from filelock import FileLock

            lock = FileLock(str(reader.root / ".schema.lock"), timeout=300)
    else:
        found = check_sqlite_folder(reader.uri)
        assert found is not None  # fast_readable: a file path
        db = found
        if not os.path.lexists(db):
            return Snapshot()  # nothing is created: no registry, no versions
        if os.access(db.parent, os.W_OK):
            from filelock import FileLock

            lock = FileLock(f"{db}.schema.lock", timeout=300)
    try:
        with lock:
            con = sqlite3.connect(
                f"file:{quote(str(db))}?mode=ro", uri=True, timeout=SQLITE_BUSY_TIMEOUT_S
            )
            try:
                try:
                    row = con.execute("SELECT version_num FROM alembic_version").fetchone()
                except sqlite3.OperationalError as err:
                    if "no such table" not in str(err):
                        raise
                    row = None
                revision = row[0] if row else None
                problem = schema_problem(revision, str(db))
                if problem is not None:
                    raise problem
                snap = query_snapshot(
                    con, reader.model, workspace=HAS_WORKSPACE[revision], where=str(db)
                )
                if reader.is_local:
                    artifacts = (reader.root / "artifacts").as_uri()
                    _repoint(snap, stale_location(con, artifacts), artifacts)
                return snap
            finally:
                con.close()
    except CompatError:
        raise
    except (sqlite3.Error, OSError) as err:
        raise InfrastructureError(
            f"registry {reader.safe_uri} is unreachable: {db}: {first_line(err)}"
        ) from None


def _repoint(snap: Snapshot, old: str | None, new: str) -> None:
    """A copied store's sources under its own artifact folder, as
    :func:`compat.registry.embedded.relocate` rewrites them (here in memory: the reader writes
    nothing)."""
    if old is None:
        return
    new = new.rstrip("/")
    for rec in snap.versions:
        if rec.source == old or rec.source.startswith(old + "/"):
            rec.source = new + rec.source[len(old) :]


def _postgres_snapshot(reader: RegistryReader) -> Snapshot:
    """Read MLflow's tables in the PostgreSQL database the tracking URI names."""
    from compat.registry.shared import CONNECT_TIMEOUT_S, plain_url, psycopg_module

    psycopg = psycopg_module()

    try:
        with psycopg.connect(plain_url(reader.uri), connect_timeout=CONNECT_TIMEOUT_S) as con:
            try:
                row = con.execute("SELECT version_num FROM alembic_version").fetchone()
            except psycopg.errors.UndefinedTable:
                con.rollback()
                row = None
            revision = row[0] if row else None
            problem = schema_problem(revision, f"registry {reader.safe_uri}")
            if problem is not None:
                raise problem
            return query_snapshot(
                con, reader.model, "%s", workspace=HAS_WORKSPACE[revision],
                where=f"registry {reader.safe_uri}",
            )  # fmt: skip
    except CompatError:
        raise
    except psycopg.Error as err:
        raise InfrastructureError(
            f"registry {reader.safe_uri} is unreachable: {first_line(err)}"
        ) from None


__all__ = ["KNOWN_SCHEMAS", "RegistryReader", "Snapshot", "fast_readable", "open_registry"]
