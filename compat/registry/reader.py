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

import base64
import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from compat.errors import CompatError, InfrastructureError, NotFoundError
from compat.registry.embedded import (
    SQLITE_BUSY_TIMEOUT_S,
    check_sqlite_folder,
    readable_uri,
    stale_location,
)
from compat.registry.store import (
    DEFAULT_MODEL,
    PRODUCTION,
    VERSION_TAG,
    Registry,
    VersionRecord,
    check_version_name,
)
from compat.registry.uris import first_line

# MLflow schema revisions (alembic_version.version_num) whose registry tables this reader
# knows, in migration order, each with whether those tables carry a ``workspace`` column. Every
# revision from mlflow 3.9.0's head (d3e4f5a6b7c8, the oldest release compat supports) to mlflow
# 3.18.0's (f4a9b2c7d1e6): between them, of the four tables read below (registered_models,
# model_versions, model_version_tags, registered_model_aliases), only 1b5f0d9ad7c1 changed
# anything the SQL reads (it added ``workspace``; 7d34483879f0 only indexes it), read off 3.18's
# migration scripts. A database at any other revision is read through MLflow's own client
# (open_registry). tests/registry/test_mlflow_releases.py (slow) runs the reader against the
# oldest and the newest release of the declared range.
SCHEMA_REVISIONS: tuple[tuple[str, bool], ...] = (
    ("d3e4f5a6b7c8", False),  # mlflow 3.9
    ("d0e1f2a3b4c5", False),
    ("c8d9e0f1a2b3", False),
    ("1b5f0d9ad7c1", True),  # mlflow 3.10: workspace columns
    ("e1f2a3b4c5d6", True),
    ("76601a5f987d", True),
    ("c3d6457b6d8a", True),  # mlflow 3.11
    ("a5b4c3d2e1f0", True),
    ("ae8bbe7743c9", True),
    ("7d34483879f0", True),  # mlflow 3.12
    ("da6fb0208061", True),
    ("89d3d66ed43f", True),
    ("b7e4c1a90f23", True),
    ("a8b9c0d1e2f3", True),
    ("c1d2e3f4a5b6", True),
    ("c3d9e7f1a2b4", True),
    ("6f8d9c3b2a1e", True),
    ("1971f2d9a75b", True),
    ("17e22815139b", True),
    ("b7e2c1a4d9f3", True),
    ("75868b020152", True),
    ("dc11669786a5", True),  # mlflow 3.17
    ("e7d1f4b2a9c6", True),
    ("8b6ad64cb8f5", True),
    ("f4a9b2c7d1e6", True),  # mlflow 3.18
)
KNOWN_SCHEMAS = tuple(revision for revision, _ in SCHEMA_REVISIONS)
_WORKSPACE = dict(SCHEMA_REVISIONS)
WORKSPACE = "default"  # MLflow's workspace when workspaces are not enabled
DELETED = "Deleted_Internal"  # a version MLflow is deleting: never listed
REST_PAGE = 1000
_UNREAD = object()  # no database file to read a schema revision from
POSTGRES_SCHEMES = ("postgresql://", "postgresql+", "postgres://")


@dataclass
class Snapshot:
    """The registered model as one read saw it."""

    exists: bool = False
    versions: list[VersionRecord] = field(default_factory=list)  # MLflow version order
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> MLflow version


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
                self._snapshot = _RestSource(self).read()
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
            body = _RestSource(self).get("runs/get", {"run_id": run_id})
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


def _record(
    version: Any, run_id: Any, source: Any, description: Any, created: Any, tags: dict[str, str]
) -> VersionRecord:
    """A version as :meth:`Registry._record` makes it from MLflow's entity."""
    return VersionRecord(
        name=tags.get(VERSION_TAG, f"mlflow-{version}"),
        mlflow_version=str(version),
        run_id=run_id or None,
        source=source or "",
        tags=tags,
        description=description or "",
        created=int(created or 0),
    )


# --- SQL: SQLite and PostgreSQL ---------------------------------------------------------------

# ``{ws}``: `` AND workspace = ?`` where the schema has workspaces, else nothing.
_MODEL = "SELECT 1 FROM registered_models WHERE name = ?{ws}"
_VERSIONS = (
    "SELECT version, run_id, source, description, creation_time FROM model_versions "
    "WHERE name = ?{ws} AND (current_stage IS NULL OR current_stage != ?) ORDER BY version"
)
_TAGS = 'SELECT version, "key", value FROM model_version_tags WHERE name = ?{ws}'
_ALIASES = "SELECT alias, version FROM registered_model_aliases WHERE name = ?{ws}"


def _query(con: Any, model: str, mark: str = "?", workspace: bool = True) -> Snapshot:
    """The snapshot from a DB-API connection to MLflow's tables (``mark``: the driver's
    parameter placeholder; ``workspace``: whether the schema's rows carry MLflow's workspace,
    always the default one here)."""
    where = (model, WORKSPACE) if workspace else (model,)

    def rows(sql: str, *params: Any) -> list[Any]:
        sql = sql.format(ws=" AND workspace = ?" if workspace else "")
        return list(con.execute(sql.replace("?", mark), params).fetchall())

    if not rows(_MODEL, *where):
        return Snapshot()
    tags: dict[int, dict[str, str]] = {}
    for version, key, value in rows(_TAGS, *where):
        tags.setdefault(int(version), {})[key] = value if value is not None else ""
    versions = [
        _record(v, run_id, source, description, created, tags.get(int(v), {}))
        for v, run_id, source, description, created in rows(_VERSIONS, *where, DELETED)
    ]
    aliases = {alias: str(v) for alias, v in rows(_ALIASES, *where)}
    return Snapshot(exists=True, versions=versions, aliases=aliases)


def _schema_problem(revision: str | None, where: str) -> InfrastructureError | None:
    if revision in KNOWN_SCHEMAS:
        return None
    found = "no alembic_version" if revision is None else f"schema revision {revision}"
    return InfrastructureError(
        f"{where}: {found}, not an MLflow schema compat's registry reader knows "
        "(the MLflow releases pyproject.toml allows); mlflow db upgrade, or the MLflow that wrote it"
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
                problem = _schema_problem(revision, str(db))
                if problem is not None:
                    raise problem
                snap = _query(con, reader.model, workspace=_WORKSPACE[revision])
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
            problem = _schema_problem(revision, f"registry {reader.safe_uri}")
            if problem is not None:
                raise problem
            return _query(con, reader.model, "%s", workspace=_WORKSPACE[revision])
    except CompatError:
        raise
    except psycopg.Error as err:
        raise InfrastructureError(
            f"registry {reader.safe_uri} is unreachable: {first_line(err)}"
        ) from None


# --- REST: an MLflow server -------------------------------------------------------------------


class _RestSource:
    """GET requests to an MLflow server's REST API, bounded as MLflow's client is (one try,
    ``MLFLOW_HTTP_REQUEST_TIMEOUT`` seconds), authenticated as it would be (the URI's
    ``user:password@``, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` or ``MLFLOW_TRACKING_TOKEN``)."""

    def __init__(self, reader: RegistryReader) -> None:
        self.reader = reader
        parts = urlsplit(reader.uri)
        self.base = urlunsplit((parts.scheme, parts.hostname or "", parts.path.rstrip("/"), "", ""))
        if parts.port is not None:
            netloc = f"{parts.hostname}:{parts.port}"
            self.base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.query = parts.query
        self.headers = {"User-Agent": "compat"}
        user = parts.username or os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = parts.password or os.environ.get("MLFLOW_TRACKING_PASSWORD")
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        if parts.username and parts.password is None and not token:
            token = parts.username  # https://<token>@host: a token as the user part
            user = None
        if user and password is not None:
            pair = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {pair}"
        elif token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or 10)

    def get(self, endpoint: str, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON body of ``GET /api/2.0/mlflow/<endpoint>``; NotFoundError for MLflow's
        RESOURCE_DOES_NOT_EXIST, InfrastructureError (exit 5) for anything else."""
        import ssl
        import urllib.error
        import urllib.request

        query = "&".join(q for q in (self.query, urlencode(params)) if q)
        url = f"{self.base}/api/2.0/mlflow/{endpoint}?{query}"
        context = None
        if url.startswith("https://"):
            if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
                context = ssl._create_unverified_context()
            elif os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH"):
                context = ssl.create_default_context(
                    cafile=os.environ["MLFLOW_TRACKING_SERVER_CERT_PATH"]
                )
        request = urllib.request.Request(url, headers=self.headers)
        safe = self.reader.safe_uri
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as err:
            body = _error_body(err)
            if body.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
                raise NotFoundError(f"registry {safe}: {body.get('message', endpoint)}") from None
            what = body.get("message") or f"HTTP {err.code} {err.reason}"
            raise InfrastructureError(
                f"registry {safe} is unreachable: {endpoint}: {first_line(Exception(what))}"
            ) from None
        except (OSError, ValueError) as err:  # refused, timed out, TLS, not JSON
            raise InfrastructureError(
                f"registry {safe} is unreachable: {first_line(err)}"
            ) from None

    def pages(self, endpoint: str, params: dict[str, Any], key: str) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            page = dict(params, max_results=REST_PAGE, **({"page_token": token} if token else {}))
            body = self.get(endpoint, page)
            yield from body.get(key, [])
            token = body.get("next_page_token")
            if not token:
                return

    def read(self) -> Snapshot:
        model = self.reader.model
        try:
            found = self.get("registered-models/get", {"name": model})["registered_model"]
        except NotFoundError:
            return Snapshot()
        aliases = {a["alias"]: str(a["version"]) for a in found.get("aliases", [])}
        versions = [
            _record(
                mv["version"],
                mv.get("run_id"),
                mv.get("source"),
                mv.get("description"),
                mv.get("creation_timestamp"),
                {t["key"]: t.get("value", "") for t in mv.get("tags", [])},
            )
            for mv in self.pages(
                "model-versions/search", {"filter": f"name='{model}'"}, "model_versions"
            )
        ]
        versions.sort(key=lambda r: int(r.mlflow_version))
        return Snapshot(exists=True, versions=versions, aliases=aliases)


def _error_body(err: Any) -> dict[str, Any]:
    try:
        body = json.loads(err.read() or b"{}")
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


__all__ = ["KNOWN_SCHEMAS", "RegistryReader", "Snapshot", "fast_readable", "open_registry"]
