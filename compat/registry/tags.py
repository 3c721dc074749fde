"""The verdict a version's tags record, read back typed: what ``compat show`` and ``compat
chain`` print and their ``--json`` carries.

The gate writes them (:func:`compat.registry.record.verdict_tags`): ``compat.checks``, every
check object as compact JSON (:class:`RecordedCheck`, the fields of
:data:`compat.contracts.gate.CHECK_FIELDS`), and ``compat.gains``, protocol -> metric -> an
update gain (:class:`RecordedGain`). A verdict recorded before those tags existed has one
``compat.check.<gallery>.<protocol>.<metric>`` tag per check (``pass +0.0123``) and one
``compat.gain.<protocol>`` per protocol (``0.4100 (not meaningful)``), read instead when the JSON
tag is absent.

MLflow's UI lets anyone edit a tag. A tag that is there but does not parse (not JSON, a check
that is no check object, a margin that is a string, gains of another shape) is
:class:`~compat.errors.BadInputError` (exit 4) naming the version and the tag, and what is wrong;
never a traceback, never a silently different verdict.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from compat.errors import BadInputError

CHECKS_TAG = "compat.checks"
GAINS_TAG = "compat.gains"
SERVE_TAG = "compat.serve"
CHECK_PREFIX = "compat.check."
GAIN_PREFIX = "compat.gain."
VERDICTS = ("pass", "fail", "accepted")


class _Tag(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RecordedCheck(_Tag):
    """One check object of ``compat.checks`` (:func:`compat.contracts.gate.check_object`)."""

    protocol: str
    metric: str
    gallery: str
    role: str | None = None
    require: str | None = None
    margin: float | None = None
    confidence: float | None = None
    new: float | None = None
    baseline: float | None = None
    difference: float | None = None
    lower_bound: float | None = None
    gain: float | None = None
    gain_meaningful: bool | None = None
    verdict: Literal["pass", "fail", "accepted"]


class RecordedGain(_Tag):
    """One update gain of ``compat.gains`` (BCT Eq. 9, :class:`compat.compare.matrix.Gain`,
    with the paragon it was measured against)."""

    paragon: str | None = None
    value: float | None = None
    meaningful: bool | None = None
    reason: str | None = None


_CHECKS = TypeAdapter(list[RecordedCheck])
_GAINS = TypeAdapter(dict[str, dict[str, RecordedGain]])


def _where(version: str | None, key: str) -> str:
    return f"{version or 'version'}: tag {key}"


def _parsed(tags: dict[str, str], key: str, adapter: TypeAdapter[Any], version: str | None) -> Any:
    """Tag ``key`` parsed through ``adapter``; None when absent; BadInputError naming the
    version, the tag and the first problem when it does not parse."""
    raw = tags.get(key)
    if not raw:
        return None
    where = _where(version, key)
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        raise BadInputError(f"{where}: not JSON (edited by hand?)") from None
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join(str(p) for p in e["loc"]).replace("\r", "\\r").replace("\n", "\\n")
        raise BadInputError(f"{where}: {field or '(root)'}: {e['msg']}") from None


def recorded_check(
    gallery: str, key: str, value: str, version: str | None = None
) -> dict[str, Any]:
    """A check read back from a tag written before the gate recorded whole checks:
    ``compat.check.<gallery>.<key>`` = ``value``, ``key`` being ``<protocol>.<metric>[.forward]``
    (metric in tag spelling, ``tar/far:0.1``) and ``value`` ``pass +0.0123`` (or ``fail n/a``).
    What such a tag does not hold is null; a verdict word it does not know is BadInputError."""
    protocol, _, metric = key.partition(".")
    forward = metric.endswith(".forward")
    if forward:
        metric = metric[: -len(".forward")]
    verdict, _, diff = str(value).partition(" ")
    if verdict not in VERDICTS or not protocol or not metric:
        raise BadInputError(
            f"{_where(version, CHECK_PREFIX + gallery + '.' + key)}: {value!r} is not "
            f"'<{'|'.join(VERDICTS)}> <difference>' of a <protocol>.<metric> check"
        )
    try:
        difference: float | None = float(diff)
    except ValueError:
        difference = None
    return RecordedCheck(
        protocol=protocol, metric=metric.replace("/", "@").replace(":", "="), gallery=gallery,
        require="forward > cross" if forward else None, difference=difference, verdict=verdict,
    ).model_dump()  # fmt: skip


def checks_from_tags(
    tags: dict[str, str], gallery: str | None = None, version: str | None = None
) -> list[dict[str, Any]]:
    """The checks the gate recorded on ``version`` (``gallery``: only those against it), each a
    check object (:class:`RecordedCheck`): ``compat.checks``; for a verdict recorded before that
    tag existed, the ``compat.check.<gallery>.<protocol>.<metric>`` tags (their other fields
    null). A tag that does not parse is exit 4 naming the version and the tag."""
    checks = _parsed(tags, CHECKS_TAG, _CHECKS, version)
    if checks is not None:
        return [c.model_dump() for c in checks if gallery is None or c.gallery == gallery]
    out = []
    for key, value in sorted(tags.items()):
        if key.startswith(CHECK_PREFIX):
            g, _, rest = key[len(CHECK_PREFIX) :].partition(".")
            if gallery is None or g == gallery:
                out.append(recorded_check(g, rest, value, version))
    return out


def gains_from_tags(tags: dict[str, str], version: str | None = None) -> dict[str, Any]:
    """The update gains the gate recorded on ``version`` (``compat.gains``: protocol -> metric
    -> :class:`RecordedGain`, as promote's ``--json`` has them); for a verdict recorded before
    that tag existed, the ``compat.gain.<protocol>`` tags (first metric; meaningful unknown,
    so null). A tag that does not parse is exit 4 naming the version and the tag."""
    gains = _parsed(tags, GAINS_TAG, _GAINS, version)
    if gains is not None:
        return {p: {m: g.model_dump() for m, g in per.items()} for p, per in gains.items()}
    out: dict[str, Any] = {}
    for key, value in tags.items():
        if key.startswith(GAIN_PREFIX) and key != GAINS_TAG:
            number, _, rest = str(value).partition(" ")
            try:
                v = float(number)
            except ValueError:
                continue  # "n/a": the gain meant nothing, as the gate wrote it
            meaningful = False if "not meaningful" in rest else None
            out[key[len(GAIN_PREFIX) :]] = {
                "*": RecordedGain(value=v, meaningful=meaningful).model_dump()
            }
    return out


def serve_from_tags(tags: dict[str, str]) -> str:
    """What ``compat chain`` shows of a version's served configuration (``native`` untagged)."""
    return tags.get(SERVE_TAG) or "native"


__all__ = [
    "CHECKS_TAG",
    "GAINS_TAG",
    "SERVE_TAG",
    "RecordedCheck",
    "RecordedGain",
    "checks_from_tags",
    "gains_from_tags",
    "recorded_check",
    "serve_from_tags",
]
