"""compat.cli.output: tables never truncated, values worded for people, JSON numbers as numbers,
the step summary; --version; contract validate --json; read commands outside a project."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from importlib.metadata import version as dist_version
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from compat.cli import output
from compat.cli.main import app

runner = CliRunner()

LONG = "a-gallery-version-with-a-name-long-enough-to-overflow-any-column"
COLUMNS = ("protocol", "metric", "gallery", output.Column("new", numeric=True), "verdict")
ROWS = [
    ["identification", "top1", LONG, "0.8123", output.Styled("pass", "green")],
    ["verification", "tar@far=0.001", "v1", "0.4567", output.Styled("FAIL", "red")],
]


def _strip(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


@pytest.fixture()
def terminal(monkeypatch: pytest.MonkeyPatch):
    """Make rich believe it writes to a terminal of the given width."""

    def set_width(columns: int) -> None:
        monkeypatch.setenv("TTY_COMPATIBLE", "1")
        monkeypatch.setenv("COLUMNS", str(columns))

    return set_width


def test_values_are_rounded_and_worded_for_people():
    assert output.fmt_value(0.812345678) == "0.8123"
    assert output.fmt_diff(0.0123456) == "+0.0123" and output.fmt_diff(-0.004) == "-0.0040"
    assert output.fmt_percent(0.57349) == "57.3%"
    assert {output.fmt_value(None), output.fmt_diff(math.nan), output.fmt_percent(None)} == {"n/a"}
    assert [output.human(x) for x in (None, True, False, 0.123456, 7)] == [
        "-",
        "yes",
        "no",
        "0.1235",
        "7",
    ]


def test_off_a_terminal_tables_are_whole_markdown_rows(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")  # a narrow width must not matter off a terminal
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    output.print_table(COLUMNS, ROWS, title="v2 vs v1", caption="2 checks")
    out = capsys.readouterr().out
    assert "…" not in out
    lines = out.splitlines()
    assert lines[0] == "v2 vs v1" and lines[-1] == "2 checks"
    assert lines[1] == "| protocol | metric | gallery | new | verdict |"
    assert lines[2] == "|---|---|---|---:|---|"
    assert lines[3] == f"| identification | top1 | {LONG} | 0.8123 | pass |"
    assert lines[4] == "| verification | tar@far=0.001 | v1 | 0.4567 | FAIL |"


def test_markdown_cells_escape_pipes():
    table = output.markdown_table(("a", "b"), [["x|y", "line\nbreak"]])
    assert table.splitlines()[2] == "| x\\|y | line break |"


@pytest.mark.parametrize("columns", [40, 60])
def test_a_narrow_terminal_wraps_rows_into_blocks(capsys, terminal, columns):
    terminal(columns)
    output.print_table(COLUMNS, ROWS, title="v2 vs v1")
    out = _strip(capsys.readouterr().out)
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= columns
    words = out.split()
    assert "0.8123" in words and "0.4567" in words and "tar@far=0.001" in words
    assert "".join(out.split()).count(LONG) == 1  # wrapped, but every character is there
    assert "- protocol: identification" in out


def test_a_wide_terminal_draws_a_rich_table(capsys, terminal):
    terminal(200)
    output.print_table(COLUMNS, ROWS, title="v2 vs v1")
    out = _strip(capsys.readouterr().out)
    assert "…" not in out and "┃ protocol" in out
    assert LONG in out and "0.8123" in out.split()


def test_stored_text_is_not_read_as_markup(capsys, terminal):
    terminal(120)
    output.say("[ok] identification top1 [bold]kept[/bold]")
    output.print_table(("field", "value"), [["note", "[ok] marker"]], show_header=False)
    out = _strip(capsys.readouterr().out)
    assert "[ok] identification top1 [bold]kept[/bold]" in out
    assert "[ok] marker" in out


def test_json_keeps_numbers_as_numbers():
    assert output.jsonable(
        {"a": math.nan, "b": [np.float32(0.5), np.int64(3)], "c": Path("x")}
    ) == {
        "a": None,
        "b": [0.5, 3],
        "c": "x",
    }
    assert output.as_int("128") == 128 and output.as_int("") is None
    assert output.as_float("0.2257") == 0.2257 and output.as_float("nan") is None


def _report(**kw):
    criterion = {
        "protocol": "identification",
        "metric": "top1",
        "require": "cross > self_parent",
        "gallery": "v1",
        "lhs_value": 0.8123456,
        "rhs_value": 0.7,
        "difference": 0.1123456,
        "margin": 0.0,
        "confidence": 0.95,
        "lower_bound": 0.0912345,
        "passed": True,
        "role": "parent",
        "gain": 0.5734,
        "gain_meaningful": True,
    }
    transitive = {**criterion, "gallery": "v0", "difference": -0.01, "passed": False,
                  "role": "transitive", "gain": 1.31, "gain_meaningful": False}  # fmt: skip
    report = {
        "version": "v2",
        "parent": "v1",
        "passed": False,
        "moved": False,
        "dry_run": False,
        "criteria": [criterion, transitive],
        "gain": {"identification": {"top1": {"paragon": "v2p", "value": 0.5734, "reason": "ok"}}},
        "messages": [],
    }
    return {**report, **kw}


def test_promote_summary_has_one_row_per_check():
    text = output.promote_summary(_report())
    lines = text.splitlines()
    assert lines[0] == "### compat promote v2 vs v1: FAILED (production unchanged)"
    head = "| identification | top1 |"
    assert (
        f"{head} v1 | cross > self_parent | 0 | 0.95 | 0.8123 | 0.7000 | +0.1123 | +0.0912 | "
        "57.3% | pass |" in lines
    )
    assert (
        f"{head} v0 (transitive) | cross > self_parent | 0 | 0.95 | 0.8123 | 0.7000 | -0.0100 | "
        "+0.0912 | 131.0% (not meaningful) | **FAIL** |" in lines
    )
    assert "- update gain identification top1 vs v2p: 57.3%, not meaningful: ok" in lines
    passed = output.promote_summary(_report(passed=True, moved=True, criteria=[]))
    assert passed.startswith("### compat promote v2 vs v1: PASSED (production -> v2)")


def test_step_summary_is_appended_only_when_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert output.append_step_summary("x\n") is None
    target = tmp_path / "summary.md"
    target.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(target))
    assert output.append_step_summary("### one\n") == target
    assert target.read_text() == "earlier step\n### one\n"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "missing" / "summary.md"))
    assert output.append_step_summary("### two\n") is None
    assert "step summary not written" in capsys.readouterr().err


def test_version_comes_from_the_installed_distribution():
    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0
    assert r.stdout.strip() == f"compat {dist_version('compat')}"


GOOD = "version: v2\nparent: v1\nembedding_dim: 16\nhead: cosface\ncriteria:\n  - protocol: identification\n    metric: top1\n    require: cross > self_parent\n"


def test_contract_validate_json(tmp_path: Path):
    good = tmp_path / "v2.yaml"
    good.write_text(GOOD)
    bad = tmp_path / "v3.yaml"
    bad.write_text(
        GOOD.replace("version: v2", "version: v3").replace("embedding_dim: 16", "embedding_dim: -4")
    )
    r = runner.invoke(app, ["contract", "validate", "--json", str(good)])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out == {
        "valid": True,
        "files": [
            {
                "file": str(good),
                "valid": True,
                "version": "v2",
                "parent": "v1",
                "criteria": 1,
                "problems": [],
            }
        ],
    }
    r = runner.invoke(app, ["contract", "validate", "--json", str(good), str(bad)])
    assert r.exit_code == 4
    out = json.loads(r.stdout)
    assert out["valid"] is False and [f["valid"] for f in out["files"]] == [True, False]
    (problem,) = out["files"][1]["problems"]
    assert problem["file"] == str(bad) and problem["field"] == "embedding_dim" and problem["reason"]
    r = runner.invoke(app, ["contract", "validate", str(good)])
    assert r.stdout.strip() == f"{good}: ok (v2, parent v1, 1 criteria)"


@pytest.mark.parametrize(
    "args", [["versions"], ["versions", "--json"], ["show", "v1"], ["chain"], ["log"]]
)
def test_read_commands_outside_a_project_exit_3_and_create_nothing(in_tmp, monkeypatch, args):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    r = runner.invoke(app, args)
    assert r.exit_code == 3, r.output
    assert "not a compat project" in r.stderr and r.stdout == ""
    assert list(in_tmp.iterdir()) == []


def test_read_commands_in_a_project_without_a_registry_create_nothing(in_tmp, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    (in_tmp / "params.yaml").write_text("{}\n")
    r = runner.invoke(app, ["versions", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout) == {"versions": []}
    r = runner.invoke(app, ["versions"])
    assert r.exit_code == 0 and r.stdout.strip() == "no versions registered"
    r = runner.invoke(app, ["log"])
    assert r.exit_code == 0 and r.stdout.strip() == "no promotions yet"
    for args in (["show", "v1"], ["chain", "v1"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 3 and "nothing is registered" in r.stderr
    assert sorted(p.name for p in in_tmp.iterdir()) == ["params.yaml"]


def test_mlflow_log_lines_never_reach_the_terminal(tmp_path: Path):
    """A fresh store's schema migration logs INFO lines through MLflow and alembic: the first
    registration creates the store (an empty file is no store: exit 5, tests/registry)."""
    from compat.embeddings.bundle import EmbeddingBundle, save_bundle

    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "v1.yaml").write_text(
        "version: v1\nembedding_dim: 4\nhead: cosface\n"
    )
    bundle = EmbeddingBundle(np.eye(4, dtype=np.float32), np.arange(4), list("abcd"), version="v1")
    save_bundle(tmp_path / "v1.npz", bundle)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MLFLOW_TRACKING_URI", "MLFLOW_LOGGING_LEVEL")
    }
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    r = subprocess.run(
        [sys.executable, "-m", "compat.cli.main", "register", "v1", "--embeddings", "v1.npz"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "registry" / "mlflow.db").stat().st_size > 0  # the migration ran
    assert r.stderr.strip() == "" and "INFO" not in r.stdout


def test_a_narrow_terminal_prints_key_value_tables_as_lines(capsys, terminal):
    terminal(30)
    output.print_table(
        ("field", "value"), [["compat.dim", "16"], ["gallery", LONG]], show_header=False
    )
    out = _strip(capsys.readouterr().out)
    assert out.splitlines()[0] == "compat.dim: 16"
    assert "…" not in out and "".join(out.split()).count(LONG) == 1


def test_score_table_off_a_terminal_shows_every_number_whole(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 3)
    emb = (rng.standard_normal((10, 8))[labels] + 0.5 * rng.standard_normal((30, 8))).astype(
        np.float32
    )
    path = tmp_path / ("embeddings-with-a-long-file-name-" * 3 + ".npz")
    with open(path, "wb") as f:
        np.savez(f, embeddings=emb, labels=labels)
    args = ["score", "-q", str(path), "-g", str(path), "-p", "identification"]
    values = json.loads(runner.invoke(app, [*args, "--json"]).stdout)["protocols"][
        "identification"
    ]["metrics"]
    r = runner.invoke(app, args, env={"COLUMNS": "40"})
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout and path.name in r.stdout
    for metric, value in values.items():
        assert f"| identification | {metric} | {value:.4f} | {100 * value:.2f} |" in r.stdout
