"""The embedded store's own files (docs/design.md, Registry conventions): ``registry/mlflow.db``
and ``registry/artifacts``, handled with the standard library alone (``sqlite3``, the file
system), never through MLflow.

- :func:`store_exists`: whether the store is there and is a usable SQLite database; a damaged
  one is named (exit 5), never read as an empty registry nor replaced by a new one;
- :func:`check_writable`: the folder ``register`` and ``promote`` write to (exit 5 when it is
  read-only);
- :func:`check_sqlite_folder`: the folder a ``sqlite:///`` URI names must exist (exit 3);
- :func:`relocate`: MLflow stores absolute artifact locations, so a copied or cloned project's
  store is re-pointed at its own ``registry/artifacts`` on first use; a read-only command
  re-points a scratch copy instead (:func:`readable_uri`), never the store in place.

:class:`compat.registry.store.Registry` (the only module that talks to MLflow's client) and
:class:`compat.registry.reader.RegistryReader` (which reads the SQLite file itself) call these.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from compat.errors import InfrastructureError, NotFoundError
from compat.registry.uris import mask

# The MLflow experiment of every version's run; in the embedded store its artifact location
# records the folder the store was created with (:func:`stale_location`).
EXPERIMENT = "compat"
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
SQLITE_BUSY_TIMEOUT_S = 30.0  # how long a read waits for another process's write transaction
# The columns where MLflow stores absolute artifact locations (MLflow 3 schema).
LOCATION_COLUMNS = (
    ("experiments", "artifact_location"),
    ("runs", "artifact_uri"),
    ("model_versions", "source"),
    ("model_versions", "storage_location"),
    ("logged_models", "artifact_location"),
)


def store_exists(root: Path, wait: bool = True) -> bool:
    """Whether the embedded store (``<root>/mlflow.db``) exists; False where nothing is there
    yet (the only place a store is ever created). Anything else that is no usable SQLite file
    (the folder a file, the database a folder, a symlink that leads nowhere, 0 bytes, another
    file's header) is an InfrastructureError (exit 5) naming it: reading it as an empty
    registry would hide the damage, and creating one would overwrite it. ``wait``: an empty
    file may be a store another process is creating: wait for the schema lock and look again
    (False: the caller holds that lock)."""
    db = root / "mlflow.db"
    if root.exists() and not root.is_dir():
        raise InfrastructureError(f"{root}: not a folder (the registry folder holds mlflow.db)")
    if not os.path.lexists(db):
        return False
    if db.is_symlink():
        try:
            db.resolve(strict=True)
        except (OSError, RuntimeError):  # a loop, or a target that is gone
            raise InfrastructureError(
                f"{db}: a symlink that leads nowhere (a loop or a missing target)"
            ) from None
    if not db.is_file():
        raise InfrastructureError(f"{db}: not a file (the registry's SQLite database)")
    try:
        with open(db, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as err:
        raise InfrastructureError(f"{db}: cannot be read: {err.strerror or err}") from None
    if not head and wait and _being_created(root, db):
        return True
    if not head:
        raise InfrastructureError(
            f"{db}: empty (0 bytes), not a registry (truncated?): restore it from a backup, "
            "or remove it to start a new registry"
        )
    if head != SQLITE_HEADER:
        raise InfrastructureError(f"{db}: not an SQLite database (damaged or another file)")
    return True


def _being_created(root: Path, db: Path) -> bool:
    """An empty database file may be one another process is creating right now, under the
    schema lock (``Registry._connect``): wait for that lock, then look again."""
    from filelock import FileLock, Timeout

    try:
        with FileLock(str(root / ".schema.lock"), timeout=300):
            return db.stat().st_size > 0
    except (OSError, Timeout):  # a folder we cannot write to: no creator can be there
        return False


def check_writable(root: Path) -> None:
    """The embedded store's folder, created if missing; a folder this process cannot write to
    (a read-only mount, no permission) is an InfrastructureError (exit 5) naming it:
    ``register`` and ``promote`` write there (the read commands do not)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InfrastructureError(
            f"{root}: the registry folder cannot be created: {err.strerror or err}"
        ) from None
    if not os.access(root, os.W_OK):
        raise InfrastructureError(
            f"{root}: the registry folder is read-only: register and promote write "
            "there (versions, show, chain, log and verify only read it)"
        )


def check_sqlite_folder(uri: str) -> Path | None:
    """The database file a ``sqlite:///`` URI names, in an existing folder (else exit 3: never
    a new store in a folder created by accident); None for an in-memory database."""
    path = Path(uri.removeprefix("sqlite:///").split("?", 1)[0])
    if not uri.startswith("sqlite:///") or str(path) in ("", ".", ":memory:"):
        return None
    if not path.parent.is_dir():
        raise NotFoundError(
            f"registry {mask(uri)}: folder {path.parent} does not exist (create it, or unset "
            "MLFLOW_TRACKING_URI for the default store under registry/)"
        )
    return path


def readable_uri(root: Path) -> str:
    """The URI MLflow reads the embedded store under ``root`` through without writing
    anything: the database opened read-only (SQLite's ``mode=ro``) in place; or, for a copied
    store not yet re-pointed at its own artifact folder (:func:`relocate`, an UPDATE), a
    re-pointed scratch copy (a snapshot, removed at exit), so that reading artifacts (``verify
    --model``) never reaches the original project's files."""
    import atexit
    import shutil
    import sqlite3
    from urllib.parse import quote

    from compat.io import make_scratch_dir

    db = root / "mlflow.db"
    artifacts = (root / "artifacts").as_uri()
    source = f"file:{quote(str(db))}?mode=ro"
    con = sqlite3.connect(source, uri=True, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        if stale_location(con, artifacts) is None:
            return f"sqlite:///{source}&uri=true"
        # compat-registry-*.pid<pid>: removed at exit, swept by a later run after a kill
        scratch = make_scratch_dir("registry")
        atexit.register(shutil.rmtree, scratch, True)
        copy = sqlite3.connect(scratch / "mlflow.db")
        try:
            con.backup(copy)
        finally:
            copy.close()
    finally:
        con.close()
    relocate(scratch / "mlflow.db", artifacts)
    return f"sqlite:///{scratch / 'mlflow.db'}"


def relocate(db: Path, artifacts_uri: str) -> bool:
    """Re-point a copied embedded store at its own artifact folder; True if it was moved.

    The ``compat`` experiment's artifact location names the artifact folder the store was
    created with; if that is not ``artifacts_uri`` (the project was copied or cloned), every
    stored location under the old folder is rewritten to the same path under the new one, in
    one transaction, so nothing (compat, MLflow's UI, a pyfunc load) reads or writes the
    original's files. Call under the schema lock.
    """
    import sqlite3

    con = sqlite3.connect(db, timeout=SQLITE_BUSY_TIMEOUT_S)
    try:
        old = stale_location(con, artifacts_uri)
        if old is None:
            return False
        new = artifacts_uri.rstrip("/")
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        with con:
            for table, column in LOCATION_COLUMNS:
                if table not in tables:
                    continue
                cols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
                if column not in cols:
                    continue
                con.execute(
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                    f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                    (new, len(old) + 1, old, len(old) + 1, old + "/"),
                )
        return True
    finally:
        con.close()


def stale_location(con: Any, artifacts_uri: str) -> str | None:
    """The artifact folder an embedded store was created with (the ``compat`` experiment's
    location) when it is not ``artifacts_uri`` (a copied store: :func:`relocate` moves it);
    None when nothing has to move. Reads only."""
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "experiments" not in tables:
        return None
    row = con.execute(
        "SELECT artifact_location FROM experiments WHERE name = ?", (EXPERIMENT,)
    ).fetchone()
    old = (row[0] or "").rstrip("/") if row else ""
    if not old.startswith("file://") or old == artifacts_uri.rstrip("/"):
        return None
    return old


__all__ = [
    "EXPERIMENT",
    "LOCATION_COLUMNS",
    "SQLITE_BUSY_TIMEOUT_S",
    "SQLITE_HEADER",
    "check_sqlite_folder",
    "check_writable",
    "readable_uri",
    "relocate",
    "stale_location",
    "store_exists",
]
