"""check_facts: a contract's declared facts against what the registry recorded."""

from __future__ import annotations

import pytest
import yaml

from compat.contracts.gate import DeclaredFacts, check_facts
from compat.contracts.schema import Contract
from compat.errors import BadInputError

CONTRACT = Contract.model_validate(
    yaml.safe_load(
        "version: v2\nparent: v1\nembedding_dim: 128\nhead: cosface\n"
        "criteria: [{protocol: identification, metric: top1, require: cross > self_parent}]\n"
    )
)


def test_matching_facts_pass_and_an_unrecorded_head_is_no_contradiction():
    check_facts(CONTRACT, DeclaredFacts(parent="v1", dim=128, head="cosface"), "v2.yaml")
    check_facts(CONTRACT, DeclaredFacts(parent="v1", dim=128, head=None), "v2.yaml")


def test_every_contradiction_is_named_on_one_line():
    with pytest.raises(BadInputError) as err:
        check_facts(CONTRACT, DeclaredFacts(parent=None, dim=256, head="arcface"), "c/v2.yaml")
    assert str(err.value) == (
        "c/v2.yaml: contract contradicts the registered card: parent: contract says 'v1', "
        "card says None; embedding_dim: contract says 128, card says 256; head: contract says "
        "'cosface', card says 'arcface'"
    )
