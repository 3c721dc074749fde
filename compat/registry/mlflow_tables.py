"""MLflow's registry tables as compat's reader reads them with SQL, without mlflow.

The schema revisions compat knows (``KNOWN_SCHEMAS``: every ``alembic_version`` of the MLflow
releases pyproject.toml allows), whether each one's registry tables carry a ``workspace``
column, the four queries the read commands need (the registered model, its versions, their
tags, its aliases), and :class:`Snapshot`, what one read of them saw. The connections (SQLite,
PostgreSQL) are :mod:`compat.registry.reader`'s; a server's REST API is
:mod:`compat.registry.reader_rest`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from compat.errors import InfrastructureError
from compat.registry.store import VERSION_TAG, VersionRecord

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
HAS_WORKSPACE = dict(SCHEMA_REVISIONS)
WORKSPACE = "default"  # MLflow's workspace when workspaces are not enabled
DELETED = "Deleted_Internal"  # a version MLflow is deleting: never listed


@dataclass
class Snapshot:
    """The registered model as one read saw it."""

    exists: bool = False
    versions: list[VersionRecord] = field(default_factory=list)  # MLflow version order
    aliases: dict[str, str] = field(default_factory=dict)  # alias -> MLflow version


class VersionRow(BaseModel):
    """One registered model version as MLflow's tables (or its REST API) hold it: the row a
    :class:`~compat.registry.store.VersionRecord` is made from, typed. A row that does not parse
    (a ``creation_time`` that is no integer, a version number that is text) is a damaged
    registry: exit 5 naming the row, the field and the value, like every other damaged store."""

    model_config = ConfigDict(extra="forbid")

    version: int
    run_id: str | None = None
    source: str | None = None
    description: str | None = None
    creation_time: int | None = None
    tags: dict[str, str] = {}


def record(
    version: Any,
    run_id: Any,
    source: Any,
    description: Any,
    created: Any,
    tags: dict[str, Any],
    where: str = "registry",
) -> VersionRecord:
    """A version as :meth:`Registry._record` makes it from MLflow's entity, from a row parsed
    through :class:`VersionRow`; InfrastructureError (exit 5) naming ``where``, the version and
    the field when it does not parse."""
    raw = {"version": version, "run_id": run_id, "source": source, "description": description,
           "creation_time": created, "tags": tags}  # fmt: skip
    try:
        row = VersionRow.model_validate(raw)
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(p) for p in e["loc"])
        got = e.get("input")
        raise InfrastructureError(
            f"{where}: model version {version!r}: {field}: {e['msg']} (got {got!r}); a damaged "
            "registry: MLflow wrote no such row"
        ) from None
    return VersionRecord(
        name=row.tags.get(VERSION_TAG, f"mlflow-{row.version}"),
        mlflow_version=str(row.version),
        run_id=row.run_id or None,
        source=row.source or "",
        tags=row.tags,
        description=row.description or "",
        created=row.creation_time or 0,
    )


# ``{ws}``: `` AND workspace = ?`` where the schema has workspaces, else nothing.
_MODEL = "SELECT 1 FROM registered_models WHERE name = ?{ws}"
_VERSIONS = (
    "SELECT version, run_id, source, description, creation_time FROM model_versions "
    "WHERE name = ?{ws} AND (current_stage IS NULL OR current_stage != ?) ORDER BY version"
)
_TAGS = 'SELECT version, "key", value FROM model_version_tags WHERE name = ?{ws}'
_ALIASES = "SELECT alias, version FROM registered_model_aliases WHERE name = ?{ws}"


def query_snapshot(
    con: Any, model: str, mark: str = "?", workspace: bool = True, where: str = "registry"
) -> Snapshot:
    """The snapshot from a DB-API connection to MLflow's tables (``mark``: the driver's
    parameter placeholder; ``workspace``: whether the schema's rows carry MLflow's workspace,
    always the default one here; ``where`` names the store in errors). Every row is parsed
    through :class:`VersionRow` (a damaged row: exit 5 naming it)."""
    where_args = (model, WORKSPACE) if workspace else (model,)

    def rows(sql: str, *params: Any) -> list[Any]:
        sql = sql.format(ws=" AND workspace = ?" if workspace else "")
        return list(con.execute(sql.replace("?", mark), params).fetchall())

    if not rows(_MODEL, *where_args):
        return Snapshot()
    tags: dict[Any, dict[str, Any]] = {}
    for version, key, value in rows(_TAGS, *where_args):
        tags.setdefault(str(version), {})[key] = value if value is not None else ""
    versions = [
        record(v, run_id, source, description, created, tags.get(str(v), {}), where)
        for v, run_id, source, description, created in rows(_VERSIONS, *where_args, DELETED)
    ]
    aliases = {alias: str(v) for alias, v in rows(_ALIASES, *where_args)}
    return Snapshot(exists=True, versions=versions, aliases=aliases)


def schema_problem(revision: str | None, where: str) -> InfrastructureError | None:
    if revision in KNOWN_SCHEMAS:
        return None
    found = "no alembic_version" if revision is None else f"schema revision {revision}"
    return InfrastructureError(
        f"{where}: {found}, not an MLflow schema compat's registry reader knows "
        "(the MLflow releases pyproject.toml allows); mlflow db upgrade, or the MLflow that wrote it"
    )


__all__ = [
    "DELETED",
    "HAS_WORKSPACE",
    "KNOWN_SCHEMAS",
    "SCHEMA_REVISIONS",
    "WORKSPACE",
    "Snapshot",
    "VersionRow",
    "query_snapshot",
    "record",
    "schema_problem",
]
