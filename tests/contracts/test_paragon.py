"""Issue 13.4 and 13.7 at the contract level: the paragon's training split, and the
contract's ``dim_mismatch``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from compat.contracts.schema import check_contract
from compat.errors import BadInputError
from compat.models.card import ModelCard, check_paragon, dim_mismatch, train_fingerprint
from compat.registry.assemble import check_paragon_split


def _card(**kw) -> ModelCard:
    base = dict(
        backbone="tiny", dim=8, in_channels=1, image_size=8, pooling="avg", weights_sha256="w"
    )
    return ModelCard.model_validate({**base, **kw})


def test_training_split_fingerprint_and_dim_mismatch_come_from_the_card():
    card = _card(data={"split": "v2", "train_fingerprint": "fp2"}, data_fingerprint="old")
    assert train_fingerprint(card) == "fp2"
    assert train_fingerprint(_card(data_fingerprint="fp1")) == "fp1"
    assert train_fingerprint(_card()) is None
    assert (
        dim_mismatch(_card(method="bct", method_params={"dim_mismatch": "truncate"})) == "truncate"
    )
    assert dim_mismatch(_card(method="independent", method_params={})) is None


def test_check_paragon_refuses_another_split_and_skips_what_is_unrecorded():
    check_paragon("v2", "v2-paragon", version_data="a" * 16, paragon_data="a" * 16, where="w")
    check_paragon("v2", "p", version_data="a" * 16, paragon_data=None, where="w")  # unrecorded
    with pytest.raises(BadInputError, match=r"^w: paragon v3-paragon was trained on split bbbb"):
        check_paragon("v2", "v3-paragon", version_data="a" * 16, paragon_data="b" * 16, where="w")


def test_the_gate_checks_the_registered_paragon_against_the_version():
    contract = SimpleNamespace(version="v2")
    records = {
        "v2": SimpleNamespace(tags={"compat.data": "a" * 16}),
        "v2-paragon": SimpleNamespace(tags={"compat.data": "a" * 16}),
        "v3-paragon": SimpleNamespace(tags={"compat.data": "c" * 16}),
    }
    check_paragon_split(contract, records, None)
    check_paragon_split(contract, records, "v2-paragon")
    with pytest.raises(BadInputError) as err:
        check_paragon_split(contract, records, "v3-paragon")
    assert err.value.exit_code == 4
    assert str(err.value.message).startswith("paragon v3-paragon: tag compat.data:")


def test_contract_dim_mismatch_is_truncate_or_pad(tmp_path):
    body = "version: v3\nparent: v2\nembedding_dim: 256\nhead: cosface\n"
    body += "criteria:\n  - {protocol: identification, metric: top1}\n"
    path = tmp_path / "v3.yaml"
    path.write_text(body + "dim_mismatch: truncate\n")
    contract, problems = check_contract(path)
    assert problems == [] and contract.dim_mismatch == "truncate"
    path.write_text(body + "dim_mismatch: crop\n")
    contract, problems = check_contract(path)
    assert contract is None and problems[0].startswith(f"{path}: dim_mismatch:")
