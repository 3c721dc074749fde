"""A real PostgreSQL server and a real ``mlflow server`` on it, for the shared-registry tests.

PostgreSQL refuses to run as root, so when the tests run as root (CI containers) its commands
run as the ``postgres`` user (``runuser``), on a free local port, with the data folder in a
temporary folder that user owns. Tests skip, with the reason, where PostgreSQL is not installed
(``.ci/run`` installs Debian's ``postgresql`` package).
"""

from __future__ import annotations

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
            self.run(str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres",
                     "--auth=trust", "-E", "UTF8", "--no-sync")  # fmt: skip
        opts = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self.run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l",
                 str(self.dir / "log"), "-w", "start")  # fmt: skip
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
    def __init__(self, backend: str, artifacts: Path) -> None:
        self.backend = backend.replace("postgresql://", "postgresql+psycopg://")
        self.artifacts = artifacts
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 180) -> None:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", self.backend,
             "--artifacts-destination", str(self.artifacts), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "2"],  # fmt: skip
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
