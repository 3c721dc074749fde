"""Property tests over every record compat reads back (issue 45 item 3): a promotion log line
(:class:`compat.registry.log_line.LogLine`, the file log and the shared log's rows alike), the
verdict tags (:mod:`compat.registry.tags`) and a registry row
(:class:`compat.registry.mlflow_tables.VersionRow`). Whatever a hand, a bug or a crash puts
there, a reader returns typed values or raises the project's one-line error naming the record
(exit 4 for the log and the tags, 5 for a damaged registry), never another exception; and what
compat writes, it reads back unchanged."""

from __future__ import annotations

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compat.errors import BadInputError, InfrastructureError
from compat.registry.log_line import LogLine, parse_line
from compat.registry.mlflow_tables import record
from compat.registry.promotions import PromotionLog, replay
from compat.registry.tags import checks_from_tags, gains_from_tags

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FIELDS = sorted(LogLine.model_fields)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
)  # fmt: skip
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
names = st.text(string.ascii_letters + string.digits + "._-", min_size=1, max_size=10)
when = st.just("2026-12-05T23:03:14.095+00:00")


@st.composite
def promotion_lines(draw) -> list[dict]:
    """A well-formed log: promotions opened pending and closed (or left pending), unregisters."""
    out: list[dict] = []
    for k in range(draw(st.integers(0, 4))):
        pid = f"p{k}"
        if draw(st.booleans()):
            out.append({"id": pid, "state": "unregistered", "kind": "unregister", "when": draw(when),
                        "who": draw(names), "version": draw(names), "why": draw(st.text(max_size=20)),
                        "run_id": draw(st.none() | names)})  # fmt: skip
            continue
        out.append({"id": pid, "state": "pending", "when": draw(when), "who": draw(names),
                    "from": draw(st.none() | names), "to": draw(names),
                    "against": draw(st.none() | names),
                    "contract_sha256": draw(st.text("0123456789abcdef", min_size=64, max_size=64)),
                    **({"kind": "rollback"} if draw(st.booleans()) else {})})  # fmt: skip
        state = draw(st.sampled_from(["committed", "aborted", None]))
        if state is not None:
            out.append({"id": pid, "state": state, "when": draw(when),
                        **({"recovered": True} if draw(st.booleans()) else {})})  # fmt: skip
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(promotion_lines())
def test_what_compat_writes_it_reads_back_unchanged(tmp_path_factory, lines):
    log = PromotionLog(tmp_path_factory.mktemp("log"))
    for line in lines:
        log.append(line)
    assert log.lines() == lines
    promotions = log.promotions()
    assert [p["id"] for p in promotions] == list(dict.fromkeys(x["id"] for x in lines))
    assert replay(log.records()) == promotions


@FAST
@given(promotion_lines().filter(bool), st.data())
def test_a_line_with_any_field_changed_is_typed_or_named(tmp_path_factory, lines, data):
    """A field of one line set to any JSON value (the issue's list or dict id, numeric digest
    or state): the log reads as typed records or fails naming file and line, exit 4."""
    n = data.draw(st.integers(0, len(lines) - 1))
    field = data.draw(st.sampled_from([*FIELDS, "from", "extra"]))
    changed = dict(lines[n])
    changed[field] = data.draw(json_values)
    changed.pop("from_", None)
    log = PromotionLog(tmp_path_factory.mktemp("log"))
    text = "".join(json.dumps(x) + "\n" for x in [*lines[:n], changed, *lines[n + 1 :]])
    log.path.write_text(text)
    try:
        read = log.lines()
        log.promotions()
    except BadInputError as err:
        assert err.exit_code == 4 and f"promotions.jsonl:{n + 1}: " in str(err)
        assert "\n" not in str(err)
    else:
        assert all(isinstance(r.get("id"), str) and isinstance(r.get("state"), str) for r in read)


@FAST
@given(json_values)
def test_any_json_value_as_a_line_is_typed_or_named(raw):
    try:
        line = parse_line(raw, "log:7")
    except BadInputError as err:
        assert str(err).startswith("log:7: ") and "\n" not in str(err)
    else:
        assert isinstance(line.id, str) and line.state in ("pending", "committed", "aborted",
                                                           "unregistered")  # fmt: skip


@FAST
@given(st.sampled_from(["compat.checks", "compat.gains"]), st.one_of(st.text(max_size=30),
       json_values.map(json.dumps)), st.booleans())  # fmt: skip
def test_any_verdict_tag_is_typed_or_named(key, value, legacy):
    tags = {key: value}
    if legacy:
        tags["compat.check.v2.identification.top1"] = "pass +0.0100"
    for read in (lambda: checks_from_tags(tags, version="v3"),
                 lambda: gains_from_tags(tags, "v3")):  # fmt: skip
        try:
            got = read()
        except BadInputError as err:
            assert str(err).startswith(f"v3: tag {key}") or "compat.check." in str(err)
        else:
            assert isinstance(got, list | dict)
    checks = checks_from_tags({"compat.checks": value}, version="v3") if _parses(value) else []
    for c in checks:
        assert c["verdict"] in ("pass", "fail", "accepted") and isinstance(c["protocol"], str)


def _parses(value: str) -> bool:
    try:
        checks_from_tags({"compat.checks": value}, version="v3")
    except BadInputError:
        return False
    return True


@FAST
@given(st.one_of(scalars, st.text(max_size=8)), st.one_of(scalars, st.text(max_size=8)))
def test_any_registry_row_is_typed_or_a_damaged_registry(version, created):
    try:
        rec = record(version, None, "s", None, created, {"compat.version": "v1"}, "db")
    except InfrastructureError as err:
        assert err.exit_code == 5 and str(err).startswith("db: model version ")
    else:
        assert isinstance(rec.created, int) and rec.mlflow_version.lstrip("-").isdigit()
