"""What a verdict writes onto the registered version."""

from __future__ import annotations

import hashlib
import json

from compat.contracts.gate import CriterionResult, Verdict
from compat.registry.record import describe, seal, verdict_tags


def _verdict() -> Verdict:
    common = dict(gallery="v1", lhs=["v2"], rhs=["v1"], margin=0.0, confidence=None,
                  description="top1 cross > self_parent")  # fmt: skip
    return Verdict(
        version="v2", parent="v1", passed=False,
        results=[
            CriterionResult(protocol="identification", metric="top1", require="cross > self_parent",
                            lhs_value=0.5, rhs_value=0.4, difference=0.1, lower_bound=0.05,
                            passed=True, **common),
            CriterionResult(protocol="identification", metric="top1", require="forward > cross",
                            lhs_value=None, rhs_value=0.4, difference=None, lower_bound=None,
                            passed=False, **common),
        ],
        gain={"identification": {"top1": {"value": 0.25, "paragon": "v2p"}}},
    )  # fmt: skip


def test_seal_digests_the_sorted_report():
    report = {"b": 1, "a": [1, 2]}
    blob = seal(report)
    assert blob == json.dumps({"a": [1, 2], "b": 1}, sort_keys=True, indent=2).encode()
    assert report["report_sha256"] == hashlib.sha256(blob).hexdigest()


def test_verdict_tags_and_description():
    tags = verdict_tags(_verdict(), "now")
    assert tags["compat.status"] == "failed" and tags["compat.verdict.at"] == "now"
    assert sorted(k for k in tags if k.startswith("compat.check")) == [
        "compat.check.v1.identification.top1",
        "compat.check.v1.identification.top1.forward",
    ]
    assert tags["compat.check.v1.identification.top1"] == "pass +0.1000"
    assert tags["compat.check.v1.identification.top1.forward"] == "fail n/a"
    assert tags["compat.gain.identification"] == "0.2500"
    text = describe(_verdict(), "v1")
    assert text.startswith("v2 FAILED its compatibility contract against v1; [ok] ")
    assert (
        "(+0.1000, lower bound 0.0500)" in text
        and "update gain identification top1 vs v2p: 25.0%" in text
    )
    assert text.endswith("promotion requested against v1.")
