"""Issue 14 item 2: the promotion log survives a crash mid-append (a torn last line)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.registry.promote import Outcome, _move_production
from compat.registry.promotions import TORN_SUFFIX, PromotionLog
from compat.registry.store import Registry

runner = CliRunner()


def cli(*args: str):
    return runner.invoke(app, list(args))


def test_lines_skip_a_torn_tail_but_keep_a_whole_record_without_newline(tmp_path):
    log = PromotionLog(tmp_path)
    pending = {"id": "a", "state": "pending", "to": "v1", "when": "t", "who": "ci"}
    log.append(pending)
    whole = log.path.read_bytes()
    log.path.write_bytes(whole + b'{"id": "a", "sta')
    assert log.lines() == [pending]
    log.path.write_bytes(whole + b'{"id": "a", "state": "committed"}')
    assert [x["state"] for x in log.lines()] == ["pending", "committed"]
    # a bad line that is not the last is corruption, not a crash: exit 4
    log.path.write_bytes(b"{oops\n" + whole)
    try:
        log.lines()
    except Exception as err:
        assert getattr(err, "exit_code", None) == 4 and ":1:" in str(err)
    else:
        raise AssertionError("a corrupt middle line must be refused")


class MemoryRegistry:
    """The registry calls a promotion makes, in memory (the log is the real file): fast enough
    to promote once per byte offset."""

    uri = "memory:"

    def __init__(self, root):
        self.root = root
        self.alias: str | None = None
        self.tags: dict[str, dict[str, str]] = {}

    def ledger(self):
        return PromotionLog(self.root)

    def production(self):
        return self.alias

    def get(self, name):
        return SimpleNamespace(name=name, mlflow_version=name, tags=self.tags.setdefault(name, {}))

    def set_tags(self, rec, tags):
        rec.tags.update(tags)

    def set_production(self, rec):
        self.alias = rec.name


def _promote(reg, name, against):
    report = {"contract": {"sha256": "c" * 64}, "report_sha256": "r" * 64}
    outcome = Outcome(report=report, verdict=None)
    moved = _move_production(reg, reg.get(name), against, report, outcome)
    return moved, outcome.messages


def _torn_cases(reg):
    """The log after v1 and v2 were promoted, split before its last record (v2 committed)."""
    assert _promote(reg, "v1", None)[0] and _promote(reg, "v2", "v1")[0]
    data = reg.ledger().path.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1
    last = data[start:]
    assert json.loads(last)["state"] == "committed" and last.endswith(b"\n")
    return data[:start], last


def _check_truncated(reg, head, last, k, read):
    """Truncate the last record at byte ``k``, promote v3, read the log back."""
    log = reg.ledger()
    aside = log.path.with_name(log.path.name + TORN_SUFFIX)
    reg.set_production(reg.get("v2"))
    reg.set_tags(reg.get("v2"), {"compat.status": "passed"})  # a crash before the status tag
    log.path.write_bytes(head + last[:k])
    aside.unlink(missing_ok=True)
    torn = 0 < k < len(last) - 1  # k == len-1: a whole record that only lost its newline
    moved, messages = _promote(reg, "v3", "v2")
    assert moved, k
    assert any("torn last line" in m for m in messages) == torn, (k, messages)
    assert aside.exists() == torn, k
    if torn:
        assert aside.read_bytes() == last[:k] + b"\n"
    promos = read()
    assert [(p["from"], p["to"], p["state"]) for p in promos] == [
        (None, "v1", "committed"),
        ("v1", "v2", "committed"),
        ("v2", "v3", "committed"),
    ], k
    assert promos[1].get("recovered", False) == (k < len(last) - 1), k
    assert all(json.loads(line) for line in log.path.read_bytes().splitlines()), k
    assert log.path.read_bytes().endswith(b"\n")
    assert reg.production() == "v3"
    # production's status tag is repaired whether or not its record was pending (a crash after
    # the committed record, before the tag: compat.registry.recovery)
    assert reg.get("v2").tags["compat.status"] == "promoted", k


def test_every_truncation_of_the_last_record_is_repaired_and_recovered(tmp_path):
    """Truncate the log inside its last record (the ``committed`` line of v2) at every byte
    offset; the next promotion never glues onto the torn line, recovers the pending v2 move
    (fixing v2's status tag), moves production to v3, and the log reads back whole."""
    reg = MemoryRegistry(tmp_path)
    head, last = _torn_cases(reg)
    for k in range(len(last)):
        _check_truncated(reg, head, last, k, reg.ledger().promotions)


def test_truncations_against_the_real_store_and_cli(project):
    """The same on the embedded MLflow store, read back with ``compat log --json``."""
    for name, parent in (("v1", None), ("v2", "v1"), ("v3", "v2")):
        project.register(name, parent=parent, noise=1.5 if parent is None else 0.8)
    reg = Registry()
    head, last = _torn_cases(reg)

    def read():
        r = cli("log", "--json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["promotions"]

    for k in (0, 1, len(last) // 2, len(last) - 2, len(last) - 1):
        _check_truncated(reg, head, last, k, read)


def test_the_torn_line_is_reported_once_through_the_cli(project):
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli("promote", "v1").exit_code == 0
    log = PromotionLog("registry")
    data = log.path.read_bytes()
    log.path.write_bytes(data[:-7])  # torn inside the committed line of v1
    r = cli("promote", "v2", "--against", "v1")
    assert r.exit_code == 0, r.output
    assert "torn last line" in r.output
    project.register("v3", parent="v2", noise=0.5, seed=3)
    r = cli("promote", "v3", "--against", "v2")
    assert r.exit_code == 0, r.output
    assert "torn last line" not in r.output  # reported once
    assert [(p["to"], p["state"]) for p in log.promotions()] == [
        ("v1", "committed"),
        ("v2", "committed"),
        ("v3", "committed"),
    ]


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (b"[1, 2]", "not a JSON object"),
        (b"3", "not a JSON object"),
        (b"null", "not a JSON object"),
        (b'{"id": "p1", "state": "pending", "to": "v2"}', "without 'when', 'who'"),
        (b'{"state": "committed"}', "without 'id'"),
    ],
)
def test_a_log_line_that_is_no_record_is_named(project, line, said):
    """Issue 30 case 13: JSON that is no promotion record is exit 4 naming the line (in
    ``log`` and ``promote``), a warning in the listings, never a traceback."""
    from typer.testing import CliRunner

    from compat.cli.main import app

    cli = CliRunner()
    project.register("v1", noise=1.5, seed=1)
    project.register("v2", parent="v1")
    assert cli.invoke(app, ["promote", "v1"]).exit_code == 0
    log = project.root / "registry" / "promotions.jsonl"
    log.write_bytes(log.read_bytes() + line + b"\n")
    n = len(log.read_bytes().splitlines())
    for args in (["log"], ["promote", "v2", "--against", "v1"], ["verify"]):
        r = cli.invoke(app, args)
        assert r.exit_code == 4, (args, r.output)
        assert r.stderr.splitlines() == [r.stderr.strip()] and "Traceback" not in r.output
        assert f"promotions.jsonl:{n}: " in r.stderr and said in r.stderr, r.stderr
    r = cli.invoke(app, ["versions"])
    assert r.exit_code == 0 and r.stderr.startswith("warning: promotion log not read: ")


def test_a_log_that_is_a_folder_is_named(project):
    from typer.testing import CliRunner

    from compat.cli.main import app

    project.register("v1", noise=1.5, seed=1)
    (project.root / "registry" / "promotions.jsonl").mkdir()
    r = CliRunner().invoke(app, ["log"])
    assert r.exit_code == 4, r.output
    assert "promotions.jsonl: not a file" in r.stderr and "Traceback" not in r.output
