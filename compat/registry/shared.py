"""The promotion lock and log of a shared registry, in the PostgreSQL database behind it.

With ``MLFLOW_TRACKING_URI`` pointing at an ``mlflow server`` whose backend store is PostgreSQL,
working copies on different machines must serialise their compare-and-set and read one log.
``COMPAT_REGISTRY_DATABASE`` names that database (the server's ``--backend-store-uri``; a
SQLAlchemy driver suffix such as ``postgresql+psycopg://`` is accepted). compat then takes a
session-level advisory lock (``pg_advisory_lock``) keyed by the registered model's name around
read-alias, check, log pending, set-alias, log committed; and the log is the table
``compat_promotions`` (one row per event, in commit order), so every copy reads the same log.
The sqlite default keeps ``registry/promotions.jsonl`` (:mod:`compat.registry.promotions`).
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from collections.abc import Iterator
from typing import Any

from compat.errors import InfrastructureError, UsageError
from compat.registry.promotions import Ledger
from compat.registry.uris import first_line, mask

TABLE = "compat_promotions"
CONNECT_TIMEOUT_S = 10
# Every statement but the lock wait ends within this (a database that accepts the connection and
# then stalls, e.g. a table locked by a stuck session, is an exit-5 error, not a hang).
STATEMENT_TIMEOUT_S = 30


def plain_url(url: str) -> str:
    """A libpq URL from a SQLAlchemy one (``postgresql+psycopg2://`` -> ``postgresql://``)."""
    return re.sub(r"^postgres(ql)?(\+\w+)?://", "postgresql://", url)


def redacted(url: str) -> str:
    """The URL (or a message quoting one) with its credentials hidden
    (:func:`compat.registry.uris.mask`): it is printed in error messages."""
    return mask(url)


def psycopg_module() -> Any:
    """:mod:`psycopg`, the PostgreSQL driver of a shared registry: an optional dependency
    (``pip install 'compat[shared]'``); without it, one line naming the extra (exit 2)."""
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            "a shared registry on PostgreSQL needs psycopg, an optional dependency: "
            "pip install 'compat[shared]'"
        ) from None
    return psycopg


def check_reachable(url: str) -> None:
    """Connect once to the PostgreSQL database at ``url`` within ``CONNECT_TIMEOUT_S``; an
    InfrastructureError (exit 5) naming it (password hidden) if that fails. MLflow's own
    engine retries a refused connection ten times with backoff (about 100 s of warnings), so a
    tracking URI naming a database is tried here first."""
    psycopg = psycopg_module()

    try:
        psycopg.connect(plain_url(url), connect_timeout=CONNECT_TIMEOUT_S).close()
    except psycopg.Error as err:
        raise InfrastructureError(
            f"registry {redacted(url)} is unreachable: {first_line(err)}"
        ) from None


def with_connect_timeout(url: str) -> str:
    """``url`` with libpq's ``connect_timeout`` (``CONNECT_TIMEOUT_S``) unless it names one: the
    engine MLflow builds from a tracking URI then waits a bounded time for every connection it
    opens after the first check, not the operating system's minutes."""
    from urllib.parse import parse_qsl, urlsplit, urlunsplit

    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(k == "connect_timeout" for k, _ in query):
        return url
    extra = f"connect_timeout={CONNECT_TIMEOUT_S}"
    return urlunsplit(parts._replace(query=f"{parts.query}&{extra}" if parts.query else extra))


def lock_key(model: str) -> int:
    """A signed 64-bit advisory-lock key for a registered model's promotions."""
    digest = hashlib.sha256(f"compat.promote:{model}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class PostgresLedger(Ledger):
    """The ledger of :mod:`compat.registry.promotions`, stored in PostgreSQL: the same typed
    lines (:class:`compat.registry.log_line.LogLine`), replay and compare-and-set as the file
    log; only the storage (a table, one ``jsonb`` row per line) and the lock (an advisory lock)
    are its own."""

    def __init__(self, url: str, model: str) -> None:
        self.url = plain_url(url)
        self.model = model
        self.where = f"{redacted(self.url)} table {TABLE}"
        self._held: Any = None  # the connection holding the advisory lock

    def _fail(self, what: str, err: BaseException) -> InfrastructureError:
        return InfrastructureError(
            f"promotion log database {redacted(self.url)} is unreachable ({what}): "
            f"{first_line(err)}"
        )

    def _connect(self) -> Any:
        psycopg = psycopg_module()

        try:
            return psycopg.connect(
                self.url,
                connect_timeout=CONNECT_TIMEOUT_S,
                autocommit=True,
                options=f"-c statement_timeout={STATEMENT_TIMEOUT_S * 1000}",
            )
        except psycopg.Error as err:
            raise self._fail("connect", err) from None

    @contextlib.contextmanager
    def _conn(self) -> Iterator[Any]:
        if self._held is not None:
            yield self._held
            return
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    @contextlib.contextmanager
    def lock(self, timeout: float = 120.0) -> Iterator[None]:
        psycopg = psycopg_module()

        conn = self._connect()
        try:
            try:
                conn.execute(f"SET statement_timeout = {int(timeout * 1000)}")
                conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(self.model),))
                conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_S * 1000}")
            except psycopg.errors.QueryCanceled:
                raise InfrastructureError(
                    f"{self.where}: promotion lock not acquired within {timeout:g} s"
                ) from None
            except psycopg.Error as err:
                raise self._fail("lock", err) from None
            try:
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {TABLE} (seq bigserial PRIMARY KEY, "
                    "model text NOT NULL, entry jsonb NOT NULL, "
                    "at timestamptz NOT NULL DEFAULT now())"
                )
            except psycopg.Error as err:
                raise self._fail("create table", err) from None
            self._held = conn
            yield
        finally:
            self._held = None
            conn.close()  # closing the session releases its advisory lock

    def _raw_lines(self) -> list[tuple[str, Any]]:
        psycopg = psycopg_module()

        with self._conn() as conn:
            try:
                rows = conn.execute(
                    f"SELECT entry FROM {TABLE} WHERE model = %s ORDER BY seq", (self.model,)
                ).fetchall()
            except psycopg.errors.UndefinedTable:
                return []  # no promotion yet: the table is created under the first lock
            except psycopg.Error as err:
                raise self._fail("read", err) from None
        # typed by the Ledger as the file log's lines are: a bad row is exit 4 naming it
        return [(f"{self.where} row {n}", r[0]) for n, r in enumerate(rows, start=1)]

    def _write(self, entry: dict[str, Any]) -> None:
        psycopg = psycopg_module()
        from psycopg.types.json import Jsonb

        with self._conn() as conn:
            try:
                conn.execute(
                    f"INSERT INTO {TABLE} (model, entry) VALUES (%s, %s)",
                    (self.model, Jsonb(entry)),
                )
            except psycopg.Error as err:
                raise self._fail("write", err) from None


__all__ = ["PostgresLedger", "lock_key", "plain_url", "redacted", "with_connect_timeout"]
