"""The registry knows the gallery (issue 41 item 3): ``compat promote --gallery TABLE`` checks the
rows a real LanceDB table holds against what the gate measures, logs the table version and a
Lance tag with the move; ``show``, ``log`` and ``chain`` print it; ``verify`` flags a table
moved by hand, a removed tag, a cleaned-up version; a rollback is gated on the rows it meets."""

from __future__ import annotations

import datetime
import json

import lance
import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from compat.cli.main import app
from compat.embeddings.table_columns import VectorColumn, arrow_vectors, column_for, fsl_type
from compat.registry.store import Registry

runner = CliRunner()
N = 60


def cli(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def _table(path, columns, dim=16):
    """A table of N rows: ``columns`` maps a version to (rows it holds, its sources)."""
    rng = np.random.default_rng(0)
    fields = [pa.field("id", pa.string(), nullable=False)]
    arrays = [pa.array([f"item{i}" for i in range(N)])]
    for version, (rows, sources) in columns.items():
        col = VectorColumn(column_for(version), version, dim, None, sources)
        fields.append(pa.field(col.name, fsl_type(dim), metadata=col.metadata()))
        x = rng.standard_normal((N, dim)).astype(np.float32)
        arrays.append(arrow_vectors(x, np.isin(np.arange(N), rows)))
    lance.write_dataset(pa.table(arrays, schema=pa.schema(fields)), path)
    return path


EMBEDDED = [{"kind": "embedded"}]


def _promote_v1_v2(project, gallery=None, *more):
    project.contract("v1")
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2)):
        if name == "v2":
            project.contract("v2", parent="v1")
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", bundle).exit_code == 0
    assert cli("promote", "v1", "--bootstrap", "0").exit_code == 0
    extra = ["--gallery", gallery] if gallery else []
    return cli("promote", "v2", "--against", "v1", "--bootstrap", "100", *extra, *more)


def test_a_promotion_records_its_gallery_and_verify_watches_it(project):
    path = _table(project.root / "db" / "g.lance",
                  {"v1": (range(N), EMBEDDED), "v2": (range(18), EMBEDDED)})  # fmt: skip
    version = lance.dataset(path).version
    r = _promote_v1_v2(project, path)
    assert r.exit_code == 0, r.output
    tag = f"compat-v2-t{version}"
    assert (
        f"(table version {version}, tag {tag}): serves vec_v2; rows v1 42 (70%), v2 18 (30%)"
        in (" ".join(r.stdout.split()))
    )
    entry = Registry().ledger().promotions()[-1]
    assert entry["gallery"] == {
        "path": str(path.resolve()), "table_version": version, "column": "vec_v2",
        "rows": {"v1": 42, "v2": 18}, "mapped": {}, "tag": tag,
    }  # fmt: skip
    assert lance.dataset(path).tags.list()[tag]["version"] == version
    shown = json.loads(cli("show", "v2", "--json").stdout)
    assert shown["gallery"]["tag"] == tag
    assert json.loads(cli("chain", "--json").stdout)["gallery"]["rows"] == {"v1": 42, "v2": 18}
    log = cli("log")
    assert log.exit_code == 0 and f"g.lance@{version}" in log.stdout
    ok = cli("verify")
    assert ok.exit_code == 0, ok.output
    assert "the gallery is as its promotion recorded" in " ".join(ok.stdout.split())

    # moved by hand: rows now served from a column the gate never saw
    ds = lance.dataset(path)
    ds.add_columns(pa.field("vec_v3", fsl_type(16), nullable=True))
    ds = lance.dataset(path)
    ds.merge_insert("id").when_matched_update_all().execute(pa.table(
        {"id": ["item50"], "vec_v3": arrow_vectors(np.ones((1, 16), np.float32))},
    ))  # fmt: skip
    bad = cli("verify", "--json")
    assert bad.exit_code == 6
    found = json.loads(bad.stdout)
    assert found["gallery"] == [
        f"gallery {path.resolve()}: rows now served from v3 (1 rows), which the promotion to v2 "
        "did not gate (moved by hand?)"
    ]
    # the tag removed, then the version cleaned up
    lance.dataset(path).tags.delete(tag)
    lance.dataset(path).cleanup_old_versions(older_than=datetime.timedelta(0))
    found = json.loads(cli("verify", "--json").stdout)["gallery"]
    assert found[0].endswith(f"tag {tag} was removed (clean-up may now delete table version "
                             f"{version})")  # fmt: skip
    assert found[1].endswith(f"table version {version}, which the promotion to v2 gated, was "
                             "cleaned up")  # fmt: skip


@pytest.mark.slow  # ~10 s: a promotion; the default run removes the tag before cleaning up
def test_the_tag_keeps_the_gated_version_through_lances_clean_up(project):
    path = _table(project.root / "g.lance", {"v1": (range(N), EMBEDDED)})
    version = lance.dataset(path).version
    assert _promote_v1_v2(project, path).exit_code == 0
    lance.dataset(path).delete("id = 'item0'")  # a newer table version
    lance.dataset(path).cleanup_old_versions(older_than=datetime.timedelta(0),
                                             error_if_tagged_old_versions=False)  # fmt: skip
    assert version in [v["version"] for v in lance.dataset(path).versions()]
    assert cli("verify").exit_code == 0


def test_rows_the_gate_does_not_measure_are_refused_before_anything_moves(project):
    # rows of an unregistered version
    path = _table(project.root / "a.lance", {"v0": (range(N), EMBEDDED), "v2": (range(5), [])})
    r = _promote_v1_v2(project, path)
    assert r.exit_code == 4
    assert f"error: {path}: vec_v0 (55 of 60 rows): v0 is not a registered version" in r.stderr
    assert Registry().production() == "v1"
    # rows psi moved into v2, but v2's contract measures no mapped rows
    psi = {"kind": "map", "from": "v1", "path": "models/v2/upgrade", "weights_sha256": "a" * 64}
    path = _table(project.root / "b.lance", {"v1": (range(N), EMBEDDED), "v2": (range(N), [psi])})
    r = cli("promote", "v2", "--against", "v1", "--bootstrap", "0", "--gallery", path)
    assert r.exit_code == 4
    assert (
        "vec_v2 (60 of 60 rows): rows a map moved into v2, but contracts/v2.yaml measures no "
        "mapped rows: add a forward criterion or serve: backfill" in " ".join(r.stderr.split())
    )
    # rows of a registered version that is not the parent (nor transitive)
    project.contract("v3", parent="v2")
    bundle = project.bundle("v3", project.embeddings(0.5, 3))
    assert cli("register", "v3", "--embeddings", bundle).exit_code == 0
    path = _table(project.root / "c.lance", {"v1": (range(N), EMBEDDED), "v3": (range(9), [])})
    r = cli("promote", "v3", "--against", "v1", "--bootstrap", "0", "--gallery", path,
            "--dry-run")  # fmt: skip
    assert r.exit_code == 4
    assert "vec_v1 (51 of 60 rows): v3's queries would read v1's rows, which its gate does not " \
        "measure (it checks v2, v3): backfill those rows into v3, or list v1 in transitive" in (
            " ".join(r.stderr.split()))  # fmt: skip
    assert not lance.dataset(path).tags.list()  # nothing tagged


ROLLBACK = """rollback:
  criteria:
    - protocol: identification
      metric: top1
      require: cross > self_parent
      margin: -0.9
"""


def test_a_rollback_serves_the_column_its_version_reads_and_is_gated_on_those_rows(project):
    project.contract("v1")
    project.contract("v2", parent="v1").write_text(
        project.contract("v2", parent="v1").read_text() + ROLLBACK
    )
    project.contract("v3", parent="v2")
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2), ("v3", 0.5, 3)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", bundle).exit_code == 0
    for args in (("v1",), ("v2", "--against", "v1"), ("v3", "--against", "v2")):
        assert cli("promote", *args, "--bootstrap", "100").exit_code == 0
    # v2's rows kept for a rollback (an in-place backfill keeps them), v3's alone on new items
    path = _table(project.root / "g.lance",
                  {"v2": (range(40), EMBEDDED), "v3": (range(N), EMBEDDED)})  # fmt: skip
    r = cli("promote", "v2", "--against", "v3", "--rollback", "--bootstrap", "100", "--gallery",
            path, "--json")  # fmt: skip
    assert r.exit_code == 0, r.output
    record = Registry().ledger().promotions()[-1]
    assert record["kind"] == "rollback" and record["gallery"]["column"] == "vec_v2"
    assert record["gallery"]["rows"] == {"v3": 20, "v2": 40}  # v3's rows: the rollback's check
    checks = json.loads(r.stdout)["checks"]
    assert [c["gallery"] for c in checks if c["role"] == "rollback"] == ["v3"]


@pytest.mark.slow  # ~20 s: psi fitted, two gates
def test_mapped_rows_pass_only_through_the_map_the_gate_measured(project):
    """Rows psi moved into vec_v2 are served only when the gate measured that very psi (its
    weights' sha256): the same psi passes and is logged as the rows' map, another is exit 4."""
    from test_promote_forward import FORWARD, _fit_psi

    from compat.maps.folder import open_card

    project.contract("v1")
    path = project.contract("v2", parent="v1", confidence=None)
    path.write_text(path.read_text().replace("criteria:\n", "criteria:\n" + FORWARD))
    for name, noise, seed in (("v1", 1.5, 1), ("v2", 0.8, 2)):
        bundle = project.bundle(name, project.embeddings(noise, seed))
        assert cli("register", name, "--embeddings", bundle).exit_code == 0
    assert cli("promote", "v1").exit_code == 0
    folder = project.root / "models" / "v2" / "upgrade"
    _fit_psi(project, folder)
    sha = open_card(folder).weights_sha256
    other = {"kind": "map", "from": "v1", "path": "elsewhere/psi", "weights_sha256": "b" * 64}
    table = _table(project.root / "other.lance",
                   {"v1": (range(N), EMBEDDED), "v2": (range(N), [other])})  # fmt: skip
    r = cli("promote", "v2", "--against", "v1", "--dry-run", "--gallery", table)
    assert r.exit_code == 4
    assert (
        f"vec_v2 (60 of 60 rows): rows moved from v1 by the map elsewhere/psi (sha256 bbbbbbbbbbbb),"
        f" but the gate measures v1's rows through {folder.relative_to(project.root)} (sha256 "
        f"{sha[:12]})" in " ".join(r.stderr.split())
    )
    same = {**other, "path": str(folder), "weights_sha256": sha}
    table = _table(project.root / "g.lance",
                   {"v1": (range(N), EMBEDDED), "v2": (range(30), [same])})  # fmt: skip
    r = cli("promote", "v2", "--against", "v1", "--gallery", table)
    assert r.exit_code == 0, r.output
    logged = Registry().ledger().promotions()[-1]["gallery"]
    assert logged["rows"] == {"v1": 30, "v2": 30} and logged["mapped"] == {"v2": sha}


def test_the_first_version_promoted_with_its_gallery_records_it_and_refuses_other_rows(project):
    """A root version (no parent) opens production with its table: the table's rows are all its
    own, recorded and tagged; rows of any other version, or rows a map moved into it, are refused
    before production is set (a root has no parent to map from and no criteria to measure)."""
    project.contract("v1")
    bundle = project.bundle("v1", project.embeddings(1.5, 1))
    assert cli("register", "v1", "--embeddings", bundle).exit_code == 0
    psi = {"kind": "map", "from": "v0", "path": "models/v1/upgrade", "weights_sha256": "b" * 64}
    mapped = _table(project.root / "m.lance", {"v1": (range(N), [psi])})
    r = cli("promote", "v1", "--bootstrap", "0", "--gallery", mapped)
    assert r.exit_code == 4
    assert "vec_v1 (60 of 60 rows): rows a map moved into v1, which has no parent to map from" in (
        " ".join(r.stderr.split())
    )
    assert Registry().production() is None and not lance.dataset(mapped).tags.list()

    path = _table(project.root / "g.lance", {"v1": (range(N), EMBEDDED)})
    version = lance.dataset(path).version
    r = cli("promote", "v1", "--bootstrap", "0", "--gallery", path)
    assert r.exit_code == 0, r.output
    assert Registry().production() == "v1"
    entry = Registry().ledger().promotions()[-1]
    assert entry["gallery"] == {
        "path": str(path.resolve()), "table_version": version, "column": "vec_v1",
        "rows": {"v1": N}, "mapped": {}, "tag": f"compat-v1-t{version}",
    }  # fmt: skip
    assert f"compat-v1-t{version}" in lance.dataset(path).tags.list()
    ok = cli("verify")
    assert ok.exit_code == 0, ok.output
