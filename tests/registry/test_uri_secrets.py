"""Issue 31 item 7: no password or token of a registry URI is ever printed, logged or recorded
(compat.registry.uris.mask)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.store import Registry
from compat.registry.uris import mask

runner = CliRunner()
SECRET = "s3cret"


def cli(*args: str):
    return runner.invoke(app, list(args))


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("http://alice:s3cret@127.0.0.1:9", "http://alice:***@127.0.0.1:9"),
        ("https://alice:s3cret@mlflow.example/x", "https://alice:***@mlflow.example/x"),
        ("postgresql://u:s3cret@h/db", "postgresql://u:***@h/db"),
        ("postgresql+psycopg://u:s3cret@h:5432/db", "postgresql+psycopg://u:***@h:5432/db"),
        ("mysql://u:@h/db", "mysql://u:***@h/db"),
        ("postgresql://u:p@s3cret@h/db", "postgresql://u:***@h/db"),  # an "@" in the password
        ("https://ghp_s3cret@host/x", "https://***@host/x"),  # a token as the user part
        ("http://127.0.0.1:9/?token=s3cret&run=1", "http://127.0.0.1:9/?token=***&run=1"),
        (
            "postgresql://h/db?sslmode=require&password=s3cret",
            "postgresql://h/db?sslmode=require&password=***",
        ),
        ("https://h/a?access_token=s3cret", "https://h/a?access_token=***"),
        (
            "https://acct.blob.core.windows.net/c?sv=1&sig=s3cret%2F&se=2",
            "https://acct.blob.core.windows.net/c?sv=1&sig=***&se=2",
        ),
        (
            "s3://b/k?X-Amz-Signature=s3cret&X-Amz-Date=1",
            "s3://b/k?X-Amz-Signature=***&X-Amz-Date=1",
        ),
        ("https://h/a?api_key=s3cret#frag", "https://h/a?api_key=***#frag"),
        # left as they are: nothing secret in them
        ("postgresql://u@db/mlflow", "postgresql://u@db/mlflow"),
        ("sqlite:////abs/registry/mlflow.db", "sqlite:////abs/registry/mlflow.db"),
        (
            "sqlite:///file:/abs/mlflow.db?mode=ro&uri=true",
            "sqlite:///file:/abs/mlflow.db?mode=ro&uri=true",
        ),
        ("http://127.0.0.1:9/path@x", "http://127.0.0.1:9/path@x"),
        ("databricks://profile", "databricks://profile"),
    ],
)
def test_mask_hides_every_credential(uri, shown):
    assert mask(uri) == shown
    assert mask(shown) == shown  # idempotent


def test_mask_finds_uris_inside_messages():
    text = (
        "registry 'http://alice:s3cret@h:9/api/2.0' failed (Caused by url: "
        "https://tok3n@h2/x?token=abc) and postgresql://bob:pw@db/m"
    )
    assert mask(text) == (
        "registry 'http://alice:***@h:9/api/2.0' failed (Caused by url: "
        "https://***@h2/x?token=***) and postgresql://bob:***@db/m"
    )


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_command_prints_a_registry_password(tmp_path, monkeypatch):
    """Every registry command at an unreachable URI carrying a password or a token: exit 5, the
    URI named with its credentials hidden, on stderr, in --json and in the CI step summary."""
    import numpy as np

    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "v1.yaml").write_text(
        "version: v1\nembedding_dim: 4\nhead: cosface\n"
    )
    save_bundle(
        tmp_path / "v1.npz",
        EmbeddingBundle(
            embeddings=np.eye(4, dtype=np.float32),
            labels=np.arange(4),
            ids=list("abcd"),
            version="v1",
        ),
    )
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    port = _closed_port()
    uris = {
        f"http://alice:{SECRET}@127.0.0.1:9": "http://alice:***@127.0.0.1:9",
        f"http://127.0.0.1:9/?token={SECRET}": "http://127.0.0.1:9/?token=***",
        f"postgresql+psycopg://alice:{SECRET}@127.0.0.1:{port}/mlflow": (
            f"postgresql+psycopg://alice:***@127.0.0.1:{port}/mlflow"
        ),
    }
    commands = (
        ["register", "v1", "--embeddings", "v1.npz"],
        ["versions"],
        ["show", "v1"],
        ["chain", "v1"],
        ["promote", "v1"],
        ["log"],
        ["verify"],
        ["verify", "--json"],
        ["verify", "--model", "v1"],
    )
    for uri, shown in uris.items():
        for args in commands:
            r = cli(*args, "--registry-uri", uri)
            assert r.exit_code == 5, (uri, args, r.output)
            assert SECRET not in r.stdout + r.stderr, (uri, args, r.output)
            assert shown.split("://")[1] in r.stderr + r.stdout, (uri, args, r.output)
    assert summary.exists() and SECRET not in summary.read_text()


def test_a_promotion_log_database_password_is_never_printed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    port = _closed_port()
    monkeypatch.setenv("COMPAT_REGISTRY_DATABASE", f"postgresql://bob:{SECRET}@127.0.0.1:{port}/m")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    for args in (["log"], ["verify"], ["verify", "--json"]):
        r = cli(*args, "--registry-uri", f"http://alice:{SECRET}@127.0.0.1:9")
        assert r.exit_code == 5, (args, r.output)
        assert SECRET not in r.stdout + r.stderr, (args, r.output)


def test_the_gate_report_and_the_log_record_hide_the_password(project, monkeypatch):
    """A registry reached at a URI with a password (a server behind basic auth, played here by
    the embedded store): the report, the run link, the promotion log record, verify's result
    and every file the project holds name it with the password hidden."""
    import compat.cli.registry_read as read_commands
    import compat.cli.registry_write as write_commands

    uri = f"http://alice:{SECRET}@mlflow.example:5000"

    def behind_basic_auth(_uri: str | None, read: bool = False) -> Registry:
        reg = Registry(root="registry", read_only=read)
        reg.client  # noqa: B018  (connected to the embedded store)
        reg.uri = uri  # what compat prints and records
        return reg

    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    monkeypatch.setattr(write_commands, "named_registry", behind_basic_auth)
    monkeypatch.setattr(read_commands, "named_registry", behind_basic_auth)
    monkeypatch.setenv("COMPAT_LOCAL_LOCK", "1")
    summary = project.root / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert cli("promote", "v1").exit_code == 0
    r = cli("promote", "v2", "--against", "v1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["registry"] == "http://alice:***@mlflow.example:5000"
    assert report["run_url"].startswith("http://alice:***@mlflow.example:5000/#/experiments/")
    r = cli("verify", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["registry"] == "http://alice:***@mlflow.example:5000"
    r = cli("log", "--json")
    assert r.exit_code == 0, r.output
    records = json.loads(r.stdout)["promotions"]
    assert [p["registry"] for p in records] == ["http://alice:***@mlflow.example:5000"] * 2
    leaked = [
        p
        for p in Path(project.root).rglob("*")
        if p.is_file() and SECRET.encode() in p.read_bytes()
    ]
    assert leaked == []


def test_a_postgres_registry_without_psycopg_names_the_extra(monkeypatch):
    """psycopg is the ``shared`` extra: a read command pointed at PostgreSQL without it is one
    line and exit 2 naming ``pip install 'compat[shared]'``, never an ImportError."""
    import sys

    from typer.testing import CliRunner

    from compat.cli.main import app

    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql://u:secret@127.0.0.1:1/db")
    r = CliRunner().invoke(app, ["versions"])
    assert r.exit_code == 2, r.output
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'compat[shared]'" in lines[0], r.output
    assert "secret" not in r.output
