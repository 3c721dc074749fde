"""A real PostgreSQL server and a real ``mlflow server`` on it, for the shared-registry tests.

PostgreSQL refuses to run as root, so when the tests run as root (CI containers) its commands
run as the ``postgres`` user (``runuser``), on a free local port, with the data folder in a
temporary folder that user owns. Tests skip, with the reason, where PostgreSQL is not installed
(``.ci/run`` installs Debian's ``postgresql`` package).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def pg_bin() -> Path | None:
    """The folder of ``initdb``/``pg_ctl``: on PATH, else Debian's /usr/lib/postgresql/<N>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(os.path.realpath(found)).parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "pg_ctl").exists() and (Path(folder) / "initdb").exists():
            return Path(folder)
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Postgres:
    def __init__(self) -> None:
        folder = pg_bin()
        assert folder is not None
        self.bin = folder
        self.as_user: list[str] = []
        self.dir = Path(tempfile.mkdtemp(prefix="pgtest-"))
        if os.geteuid() == 0:
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.dir, "postgres", "postgres")
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/mlflow"

    def run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        if not self.data.exists():
            initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres"]
            self.run(*initdb, "--auth=trust", "-E", "UTF8", "--no-sync")
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        log = str(self.dir / "log")
        self.run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", log, "-w", "start"
        )
        import psycopg

        with psycopg.connect(self.url.replace("/mlflow", "/postgres"), autocommit=True) as c:
            if not c.execute("SELECT 1 FROM pg_database WHERE datname='mlflow'").fetchone():
                c.execute("CREATE DATABASE mlflow")

    def stop(self) -> None:
        try:
            self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class MlflowServer:
    def __init__(self, backend: str, artifacts: Path, port: int | None = None) -> None:
        self.backend = backend.replace("postgresql://", "postgresql+psycopg://")
        self.artifacts = artifacts
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 600) -> None:
        """Start and wait for ``/health`` (the first start migrates the schema: minutes on a
        loaded machine)."""
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        self.proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend),
                *("--artifacts-destination", str(self.artifacts), "--host", "127.0.0.1"),
                *("--port", str(self.port), "--workers", "1"),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.artifacts.parent / "mlflow-server.log", "ab"),  # noqa: SIM115
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited {self.proc.returncode}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError("mlflow server did not start")

    def kill(self) -> None:
        """SIGKILL the whole server (its workers too): a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


class Shared:
    """PostgreSQL plus an mlflow server on it; ``env`` points compat at both."""

    def __init__(self) -> None:
        self.pg = Postgres()
        self.pg.start()
        self.folder = Path(tempfile.mkdtemp(prefix="mlflow-server-"))
        (self.folder / "artifacts").mkdir()
        self.server = MlflowServer(self.pg.url, self.folder / "artifacts")
        try:
            self.server.start()
        except BaseException:
            self.server.kill()
            self.pg.stop()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    @property
    def env(self) -> dict[str, str]:
        return {"MLFLOW_TRACKING_URI": self.server.uri, "COMPAT_REGISTRY_DATABASE": self.pg.url}

    def restart_server(self) -> None:
        self.server.kill()
        self.server = MlflowServer(self.pg.url, self.folder / "artifacts", port=self.server.port)
        self.server.start()

    def reset(self) -> None:
        """An empty registry and log (the server and database stay up)."""
        import psycopg

        with psycopg.connect(self.pg.url, autocommit=True) as c:
            c.execute("DROP TABLE IF EXISTS compat_promotions")
        from mlflow import MlflowClient

        client = MlflowClient(self.server.uri, self.server.uri)
        with contextlib.suppress(Exception):  # not registered yet
            client.delete_registered_model("compat")

    def stop(self) -> None:
        try:
            self.server.kill()
        finally:
            self.pg.stop()
            shutil.rmtree(self.folder, ignore_errors=True)


def skip_reason() -> str | None:
    """Why the shared-server tests cannot run here, or None."""
    if pg_bin() is None:
        return "PostgreSQL is not installed (initdb/pg_ctl not found; .ci/run installs it)"
    if os.geteuid() == 0 and (shutil.which("runuser") is None or not _has_user("postgres")):
        return "running as root without runuser or a postgres user to run PostgreSQL as"
    return None


def _has_user(name: str) -> bool:
    import pwd

    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
