"""experiments/sequence/gate.py on a tiny trained sequence, through the real ``compat`` CLI:
contracts with every earlier task as ``transitive``, register, promote in order, and
``compat chain`` showing a verdict for every (version, ancestor) pair."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from seq_scripts import script

from compat.models.card import ModelCard


def _card(**fields) -> ModelCard:
    return ModelCard(backbone="tiny", dim=15, in_channels=1, image_size=8, pooling="avg",
                     weights_sha256="0" * 64, head="dsimplex", **fields)  # fmt: skip


def test_contract_lists_every_earlier_task():
    gate = script("gate")
    card = _card(parent="m-t3")
    c = gate.contract_for("m-t4", card, ["m-t1", "m-t2", "m-t3"])
    assert c == {
        "version": "m-t4",
        "embedding_dim": 15,
        "head": "dsimplex",
        "parent": "m-t3",
        "criteria": [
            {"protocol": "identification", "metric": "top1", "require": "cross > self_parent"}
        ],
        "transitive": ["m-t1", "m-t2"],
    }
    assert gate.contract_for("m-t1", _card(), []) == {
        "version": "m-t1",
        "embedding_dim": 15,
        "head": "dsimplex",
    }


@pytest.fixture(scope="module")
def registry_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty registry whose MLflow schema exists (migrating a new sqlite store takes seconds)."""
    from compat.registry.store import Registry

    root = tmp_path_factory.mktemp("registry-template") / "registry"
    Registry(uri=f"sqlite:///{root / 'mlflow.db'}", root=root).versions()
    return root


def test_replacement_keeps_the_simplex_on_another_backbone(tiny_sequence):
    cards = {
        v: json.loads((tiny_sequence / "models" / v / "card.json").read_text())
        for v in ("hoc-t1", "hoc-t2", "hoc-t3")
    }
    assert cards["hoc-t2"]["init"]["kind"] == "parent"
    assert cards["hoc-t3"]["init"]["kind"] == "scratch"  # a replacement never starts from t2
    assert (cards["hoc-t1"]["backbone"], cards["hoc-t3"]["backbone"]) == ("tiny", "small-cnn")
    assert {c["dim"] for c in cards.values()} == {15}  # K - 1 whatever the backbone
    assert cards["hoc-t3"]["split"] == "t3-all"
    assert (
        cards["hoc-t3"]["classes"][: len(cards["hoc-t2"]["classes"])] == cards["hoc-t2"]["classes"]
    )


def test_gate_registers_promotes_and_shows_every_pair(
    tiny_sequence, registry_schema, monkeypatch: pytest.MonkeyPatch, capsys
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tiny_sequence)
    shutil.copytree(registry_schema, tiny_sequence / "gate" / "hoc" / "registry")
    gate = script("gate")
    assert gate.main(["hoc", "--bootstrap", "0"]) == 0
    out = capsys.readouterr().out
    assert "compat promote hoc-t2 --against hoc-t1" in out
    assert "compat chain hoc-t3" in out

    work = tiny_sequence / "gate" / "hoc"
    from compat.contracts.schema import load_contract

    t3 = load_contract(work / "contracts" / "hoc-t3.yaml")
    assert (t3.parent, t3.transitive, t3.head) == ("hoc-t2", ["hoc-t1"], "dsimplex")

    # compat chain --json, through the same CLI
    assert gate.compat(["chain", "hoc-t3", "--json", *_uri(work)], work) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["lineage"] == ["hoc-t3", "hoc-t2", "hoc-t1"]
    pairs = {(p["query"], p["gallery"]): p for p in result["pairs"]}
    assert set(pairs) == {("hoc-t3", "hoc-t2"), ("hoc-t3", "hoc-t1"), ("hoc-t2", "hoc-t1")}
    assert pairs[("hoc-t3", "hoc-t1")]["kind"] == "transitive"
    for p in pairs.values():
        assert p["verdict"] in ("pass", "fail"), p  # every pair was checked
        assert any(
            (c["protocol"], c["metric"]) == ("identification", "top1") for c in p["checks"]
        ), p
    assert result["production"] in ("hoc-t1", "hoc-t2", "hoc-t3")


def test_print_only_touches_nothing(tiny_sequence, monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(tiny_sequence)
    gate = script("gate")
    chain = yaml.safe_load((tiny_sequence / "evaluate.yaml").read_text())["hoc"]["chain"]
    assert gate.gate("hoc", root=tiny_sequence, dry=True) == 0
    out = capsys.readouterr().out
    assert out.count("compat register") == len(chain)
    assert out.count("compat promote") == len(chain)


def _uri(work):
    return ["--registry-uri", f"sqlite:///{work / 'registry' / 'mlflow.db'}"]
