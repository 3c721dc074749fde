"""A real SIGKILL of ``compat backfill`` on a LanceDB table, then the same command again: the
table ends as an uninterrupted run leaves it, and while the first run holds the table a second
backfill of it is refused (exit 6)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import lance
import pytest

import compat.embeddings.table_write as table_write
from compat.backfill.resume import work_dir_for
from compat.backfill.table import backfill_table
from compat.embeddings.table_write import import_gallery

SLOW_CLI = Path(__file__).with_name("slow_table_backfill.py")
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def _cmd(table, psi, *, slow=False):
    entry = [str(SLOW_CLI)] if slow else ["-m", "compat.cli.main"]
    return [sys.executable, *entry, "backfill", "--gallery", str(table), "--from", "v1",
            "--to", "v2", "--psi", str(psi), "--batch-size", "16", "--no-progress", "--json"]  # fmt: skip


def _content(path):
    """What a reader of the table sees: every column, the schema and its metadata."""
    ds = lance.dataset(path)
    return ds.to_table(), ds.schema


def _setup(tmp_path, kit, monkeypatch):
    monkeypatch.setattr(table_write, "ROWS_PER_FRAGMENT", 40)  # 10 fragments
    kit.make_psi(tmp_path / "psi")
    kit.make_gallery(tmp_path / "g.npz", n=400)
    table = tmp_path / "db" / "g.lance"
    import_gallery(tmp_path / "g.npz", table)
    ref = tmp_path / "ref" / "g.lance"
    shutil.copytree(table, ref)
    backfill_table(ref, source="v1", target="v2", psi_dir=tmp_path / "psi", batch_size=16)
    return table, ref


def _wait_for(what, deadline=120):
    end = time.time() + deadline
    while time.time() < end and not what():
        time.sleep(0.02)


def _kill(victim):
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    assert victim.returncode == -signal.SIGKILL, victim.stderr.read().decode()[-2000:]


def _same_as(table, ref):
    got, want = _content(table), _content(ref)
    assert got[0].equals(want[0]) and got[1].equals(want[1], check_metadata=True)
    ds = lance.dataset(table)
    read = {f.path for frag in ds.get_fragments() for f in frag.metadata.files}
    assert {p.name for p in (table / "data").iterdir()} == read  # no file left unreferenced
    assert sorted(p.name for p in table.parent.iterdir()) == ["g.lance"]  # no work folder, no lock


def test_sigkill_mid_run_then_rerun_gives_the_uninterrupted_table(tmp_path, kit, monkeypatch):
    table, ref = _setup(tmp_path, kit, monkeypatch)
    work = work_dir_for(table)
    stop = tmp_path / "stopped"
    victim = subprocess.Popen(_cmd(table, tmp_path / "psi", slow=True),
                              env={**ENV, "SLOW_TABLE_STOP": str(stop)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _wait_for(lambda: victim.poll() is not None or stop.exists())
    # while it runs, a second backfill of the table is refused at once, touching nothing
    second = subprocess.run(_cmd(table, tmp_path / "psi"), env=ENV, capture_output=True,
                            timeout=120)  # fmt: skip
    assert second.returncode == 6, second.stderr.decode()[-2000:]
    assert b"is writing this table" in second.stderr
    _kill(victim)
    saved = len(list(work.glob("fragment-*.json")))
    assert saved == 3  # stopped after its third fragment, of 10
    assert lance.dataset(table).to_table(columns=["vec_v2"]).column(0).null_count == 400

    done = subprocess.run(_cmd(table, tmp_path / "psi"), env=ENV, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    result = json.loads(done.stdout)
    assert (result["upgraded"], result["resumed_batches"], result["batches"]) == (400, saved, 10)
    assert b"resuming" in done.stderr
    _same_as(table, ref)


@pytest.mark.slow
def test_sigkill_after_the_commit_then_rerun_finishes_clean(tmp_path, kit, monkeypatch):
    table, ref = _setup(tmp_path, kit, monkeypatch)
    hold = tmp_path / "committed"
    victim = subprocess.Popen(_cmd(table, tmp_path / "psi", slow=True),
                              env={**ENV, "SLOW_TABLE_HOLD": str(hold)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    _wait_for(lambda: victim.poll() is not None or hold.exists())
    _kill(victim)
    assert work_dir_for(table).exists()  # killed before it removed its work folder
    done = subprocess.run(_cmd(table, tmp_path / "psi"), env=ENV, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(done.stdout)["upgraded"] == 0  # the rows were committed: nothing to do
    _same_as(table, ref)
