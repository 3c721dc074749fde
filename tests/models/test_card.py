"""Typed cards: cards written by the previous release load and rewrite to the same bytes; a
missing or unknown field is a one-line bad-input error naming the file and the field; the one
upgrade-card check names the card, the field and both values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from compat.errors import BadInputError, NotFoundError
from compat.models.card import (
    ModelCard,
    UpgradeCard,
    check_upgrade,
    read_model_card,
    read_upgrade_card,
    write_model_card,
    write_upgrade_card,
)

# Captured from the release before typed cards: train_arrays (v1 independent, v2 bct fine-tuned
# from v1) and train_upgrade (psi v1 -> v2), exactly as they wrote them.
FIXTURES = Path(__file__).parent / "fixtures"
MODEL_CARDS = ["model_card_v1.json", "model_card_v2.json"]


@pytest.mark.parametrize("name", MODEL_CARDS)
def test_released_model_card_loads_and_rewrites_byte_identical(tmp_path, name):
    card = read_model_card(FIXTURES / name)
    assert card.backbone == "tiny" and card.dim == 8 and card.class_names[:2] == ["c000", "c001"]
    out = write_model_card(tmp_path, card)
    assert out == tmp_path / "card.json"
    assert out.read_bytes() == (FIXTURES / name).read_bytes()


def test_released_model_card_fields_are_typed():
    card = read_model_card(FIXTURES / "model_card_v2.json")
    assert card.parent == "v1" and card.method == "bct" and card.card_schema == 1
    assert card.init is not None and card.init["kind"] == "parent"
    assert card.data is not None and card.data.train_fingerprint == "fp-v2"
    assert isinstance(card.training_seconds, float) and card.config is not None


def test_released_upgrade_card_loads_and_rewrites_byte_identical(tmp_path):
    src = FIXTURES / "upgrade_card_v2.json"
    card = read_upgrade_card(src)
    assert (card.from_, card.to, card.in_dim, card.hidden) == ("v1", "v2", 8, 8)
    write_upgrade_card(tmp_path, card)
    assert (tmp_path / "card.json").read_bytes() == src.read_bytes()
    assert card.provenance("p") == {
        "path": "p",
        "weights_sha256": card.weights_sha256,
        "from": "v1",
    }


def test_unset_fields_stay_absent_and_null_stays_null(tmp_path):
    card = ModelCard.model_validate(
        {"backbone": "tiny", "dim": 4, "in_channels": 1, "image_size": 8, "pooling": "avg",
         "weights_sha256": "a" * 64, "parent": None}
    )  # fmt: skip
    written = json.loads(write_model_card(tmp_path, card).read_text())
    assert written["parent"] is None and "head" not in written and "version" not in written


@pytest.mark.parametrize("field", ["dim", "weights_sha256", "backbone"])
def test_missing_model_card_field_names_file_and_field(tmp_path, field):
    shutil.copy(FIXTURES / "model_card_v1.json", tmp_path / "card.json")
    data = json.loads((tmp_path / "card.json").read_text())
    del data[field]
    (tmp_path / "card.json").write_text(json.dumps(data))
    with pytest.raises(BadInputError) as err:
        read_model_card(tmp_path)
    msg = str(err.value)
    assert msg == f"{tmp_path / 'card.json'}: {field}: missing field" and "\n" not in msg


def test_unknown_wrong_and_absent(tmp_path):
    data = json.loads((FIXTURES / "model_card_v1.json").read_text())
    (tmp_path / "card.json").write_text(json.dumps({**data, "dimm": 3}))
    with pytest.raises(BadInputError, match=r"card\.json: dimm: unknown field$"):
        read_model_card(tmp_path)
    (tmp_path / "card.json").write_text(json.dumps({**data, "dim": "wide"}))
    with pytest.raises(BadInputError, match=r"card\.json: dim: "):
        read_model_card(tmp_path)
    (tmp_path / "card.json").write_text("[1]")
    with pytest.raises(BadInputError, match="must be a JSON object"):
        read_model_card(tmp_path)
    (tmp_path / "card.json").write_text("{")
    with pytest.raises(BadInputError, match="not valid JSON"):
        read_model_card(tmp_path)
    with pytest.raises(NotFoundError, match="model card not found"):
        read_model_card(tmp_path / "nowhere")


def test_model_card_named_and_updated():
    card = read_model_card(FIXTURES / "model_card_v1.json")
    assert card.named("other").version == "v1"
    bare = card.updated(version=None)
    assert bare.version is None and bare.named("v9").version == "v9"
    with pytest.raises(ValidationError):
        card.updated(dim="wide")


def test_model_card_is_not_an_upgrade_card(tmp_path):
    shutil.copy(FIXTURES / "model_card_v1.json", tmp_path / "card.json")
    with pytest.raises(BadInputError, match=r"card\.json: kind: not an upgrade module card$"):
        read_upgrade_card(tmp_path)
    with pytest.raises(NotFoundError, match="upgrade module card not found"):
        read_upgrade_card(tmp_path / "nowhere")


def _psi() -> UpgradeCard:
    return read_upgrade_card(FIXTURES / "upgrade_card_v2.json")


def test_check_upgrade_passes_and_skips_unknown_facts():
    card = _psi()
    check_upgrade(card, "w", target="v2")
    check_upgrade(card, "w", source="v1", target="v2", from_weights=card.from_weights_sha256,
                  to_weights=card.to_weights_sha256, in_dim=8)  # fmt: skip
    hand_made = card.updated(from_weights_sha256=None)
    check_upgrade(hand_made, "w", target="v2", from_weights="f" * 64)


def test_check_upgrade_versions():
    with pytest.raises(BadInputError, match=r"^w: from/to: psi upgrades v1 -> v2, not v1 -> v3$"):
        check_upgrade(_psi(), "w", target="v3")
    with pytest.raises(BadInputError, match=r"^w: from/to: psi upgrades v1 -> v2, not v0 -> v2$"):
        check_upgrade(_psi(), "w", source="v0", target="v2")
    with pytest.raises(BadInputError, match=r"psi upgrades v1 -> v2, the contract needs v0 -> v2"):
        check_upgrade(_psi(), "w", source="v0", target="v2", wanted="the contract needs v0 -> v2")


@pytest.mark.parametrize("role", ["from", "to"])
def test_check_upgrade_weights(role):
    card = _psi()
    version = {"from": "v1", "to": "v2"}[role]
    fitted = getattr(card, f"{role}_weights_sha256")
    with pytest.raises(BadInputError) as err:
        check_upgrade(card, "w/card.json", target="v2", **{f"{role}_weights": "b" * 64},
                      weights_origin="the registered ones are")  # fmt: skip
    assert str(err.value) == (
        f"w/card.json: {role}_weights_sha256: psi was fitted on {version} weights {fitted[:12]}..., "
        f"but the registered ones are {'b' * 12}...; re-run upgrade@v2"
    )
    with pytest.raises(BadInputError, match=r"; do this$"):
        check_upgrade(card, "w", target="v2", **{f"{role}_weights": "b" * 64}, rerun="do this")


def test_check_upgrade_in_dim():
    with pytest.raises(BadInputError, match=r"^w: in_dim: psi takes 8-dim rows, the rows have 12$"):
        check_upgrade(_psi(), "w", target="v2", in_dim=12)
    with pytest.raises(BadInputError, match=r"psi takes 8-dim rows, v1's embeddings have 4$"):
        check_upgrade(_psi(), "w", target="v2", in_dim=4, rows_of="v1's embeddings")


def test_cards_load_without_torch(heavy_imports):
    modules = ("compat.models.card", "compat.registry.register", "compat.backfill.apply")
    assert heavy_imports(*modules, heavy=("torch",)) == []
