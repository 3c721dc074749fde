"""The evaluate section of params.yaml: defaults, typos and cross-field checks."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from compat.evaluate.config import EvaluateConfig


def test_defaults_and_versions():
    c = EvaluateConfig(chain=["v1", "v2", "v3"], paragon={"v2": "v2-ind", "v3": "v3-ind"})
    assert c.protocols == ["identification", "open-set", "verification"]
    assert (c.bootstrap, c.seed, c.full_square, c.confidence) == (1000, 0, False, 0.95)
    assert c.versions() == ["v1", "v2", "v3", "v2-ind", "v3-ind"]
    assert c.protocol_options()["fars"] == (0.1, 0.01, 0.001)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"chain": ["v1"], "bootsrap": 10}, "Extra inputs are not permitted"),
        ({"chain": []}, "at least 1 item"),
        ({"chain": ["v1", "v1"]}, "listed twice"),
        ({"chain": ["v1"], "protocols": ["ranking"]}, "unknown protocol 'ranking'"),
        ({"chain": ["v1"], "paragon": {"v9": "p"}}, "not in the chain"),
        ({"chain": ["v1"], "paragon": {"v1": "v1"}}, "its own paragon"),
        ({"chain": ["v1"], "far": [0.0]}, "strictly between"),
        ({"chain": ["v1"], "bootstrap": -1}, "greater than or equal"),
        ({"chain": ["v1"], "top_k": [0]}, "must lie in 1 .. 1,000,000"),
    ],
)
def test_invalid_sections_are_errors(data, message):
    with pytest.raises(ValidationError, match=message):
        EvaluateConfig(**data)


def test_config_module_is_import_light(heavy_imports):
    assert heavy_imports("compat.evaluate.config") == []
