"""Custom Great Expectations expectations that compare some rows of a frame with other rows.

GX 1.x validates one batch at a time and ships no expectation relating some rows of a batch to
other rows of it ("every item of v1 is an item of v2", "each class holds 30% of its source
items"). The split's suite (:mod:`compat.data.suite`) validates one long frame
(:mod:`compat.data.rows`: a row per source item, training or held-out item, declared class and
verification pair), so its relations between sets are such comparisons. Each is written here the
way GX's own expectations are: an expectation class whose ``row_condition`` selects the rows
checked, and GX metrics that compute the answer from the frame, per row (a map condition, so a
failure lists the offending rows) or per batch. The rows compared against are selected by a
second condition, ``rows``, read through the metric ``compat.rows.distinct`` (or
``compat.rows.value_counts``) on that condition's domain: the reference set is a metric GX
computes and caches, never a value set written into the suite (GX copies an expectation's
``value_set`` many times while planning: tens of seconds at 20,000 items, docs/findings.md).

Defining the classes registers them with GX under their snake-case type names
(``expect_column_values_to_be_in_rows``, ...), so a suite JSON naming them loads once this module
is imported. Importing it imports great_expectations (about 3 s): only the split stage's
validation path does (:mod:`compat.data.expectations`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pandas as pd
from great_expectations.compatibility import pydantic
from great_expectations.core.metric_domain_types import MetricDomainTypes
from great_expectations.core.suite_parameters import SuiteParameterDict
from great_expectations.execution_engine import PandasExecutionEngine
from great_expectations.expectations.expectation import (
    BatchExpectation,
    ColumnMapExpectation,
    ColumnPairMapExpectation,
)
from great_expectations.expectations.metrics.map_metric_provider import (
    ColumnMapMetricProvider,
    ColumnPairMapMetricProvider,
    column_condition_partial,
    column_pair_condition_partial,
)
from great_expectations.expectations.metrics.metric_provider import metric_value
from great_expectations.expectations.metrics.table_metric_provider import TableMetricProvider
from great_expectations.expectations.model_field_types import ConditionParser
from great_expectations.expectations.row_conditions import (
    AndCondition,
    ComparisonCondition,
    NullityCondition,
    OrCondition,
    RowConditionType,
    deserialize_row_condition,
)
from great_expectations.validator.metric_configuration import MetricConfiguration

from compat.data.scenarios import Share

Rows = AndCondition | OrCondition | ComparisonCondition | NullityCondition
"""The rows a comparison reads: a GX row condition (``Column("set") == "v2"`` and so on)."""

DISTINCT = "compat.rows.distinct"
VALUE_COUNTS = "compat.rows.value_counts"
CONDITION = ".condition"  # GX's suffix of a map metric's per-row condition


# ---- metrics: what the rows of a condition hold ------------------------------------------------


class RowsDistinct(TableMetricProvider):
    """The distinct values of ``columns`` over the rows the domain's row condition selects: a
    frozenset of values (one column) or of tuples (several)."""

    metric_name = DISTINCT
    value_keys = ("columns",)

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(
        cls,
        execution_engine: PandasExecutionEngine,
        metric_domain_kwargs: dict,
        metric_value_kwargs: dict,
        metrics: dict[str, Any],
        runtime_configuration: dict,
    ) -> frozenset:
        df, _, _ = execution_engine.get_compute_domain(
            domain_kwargs=metric_domain_kwargs, domain_type=MetricDomainTypes.TABLE
        )
        columns = list(metric_value_kwargs["columns"])
        if len(columns) == 1:
            return frozenset(df[columns[0]].dropna())
        return frozenset(zip(*(df[c] for c in columns), strict=True))


class RowsValueCounts(TableMetricProvider):
    """How many of the rows the domain's row condition selects hold each value of ``column``."""

    metric_name = VALUE_COUNTS
    value_keys = ("column",)

    @metric_value(engine=PandasExecutionEngine)
    def _pandas(
        cls,
        execution_engine: PandasExecutionEngine,
        metric_domain_kwargs: dict,
        metric_value_kwargs: dict,
        metrics: dict[str, Any],
        runtime_configuration: dict,
    ) -> dict[Any, int]:
        df, _, _ = execution_engine.get_compute_domain(
            domain_kwargs=metric_domain_kwargs, domain_type=MetricDomainTypes.TABLE
        )
        return {k: int(v) for k, v in df[metric_value_kwargs["column"]].value_counts().items()}


def _on_rows(
    metric: MetricConfiguration, rows: Any, name: str, **value: Any
) -> MetricConfiguration:
    """``name`` computed on the rows ``rows`` selects, in the batch ``metric`` reads."""
    domain = {"row_condition": rows}
    if "batch_id" in metric.metric_domain_kwargs:
        domain["batch_id"] = metric.metric_domain_kwargs["batch_id"]
    return MetricConfiguration(name, metric_domain_kwargs=domain, metric_value_kwargs=value)


class _ReadsRows:
    """A map metric whose condition reads metrics of other rows: ``_references`` names them."""

    condition_metric_name: ClassVar[str]

    @classmethod
    def _references(cls, metric: MetricConfiguration) -> dict[str, MetricConfiguration]:
        raise NotImplementedError

    @classmethod
    def _get_evaluation_dependencies(
        cls,
        metric: MetricConfiguration,
        configuration: Any = None,
        execution_engine: Any = None,
        runtime_configuration: dict | None = None,
    ) -> dict:
        deps = super()._get_evaluation_dependencies(  # type: ignore[misc]
            metric=metric,
            configuration=configuration,
            execution_engine=execution_engine,
            runtime_configuration=runtime_configuration,
        )
        if metric.metric_name == cls.condition_metric_name + CONDITION:
            deps.update(cls._references(metric))
        return deps


class ColumnValuesInRows(_ReadsRows, ColumnMapMetricProvider):
    condition_metric_name = "compat.column_values.in_rows"
    condition_value_keys = ("rows", "rows_column")

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column: pd.Series, _metrics: dict, **kwargs: Any) -> pd.Series:
        return column.isin(_metrics["reference"])

    @classmethod
    def _references(cls, metric: MetricConfiguration) -> dict[str, MetricConfiguration]:
        kw = metric.metric_value_kwargs
        column = kw.get("rows_column") or metric.metric_domain_kwargs["column"]
        return {"reference": _on_rows(metric, kw["rows"], DISTINCT, columns=[column])}


class ColumnValuesNotInRows(ColumnValuesInRows):
    condition_metric_name = "compat.column_values.not_in_rows"

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column: pd.Series, _metrics: dict, **kwargs: Any) -> pd.Series:
        return ~column.isin(_metrics["reference"])


_PAIR_DOMAIN = ("batch_id", "table", "column_A", "column_B", "row_condition", "condition_parser")


class ColumnPairValuesInRows(_ReadsRows, ColumnPairMapMetricProvider):
    condition_metric_name = "compat.column_pair_values.in_rows"
    condition_domain_keys = (*_PAIR_DOMAIN, "ignore_row_if")
    condition_value_keys = ("rows",)

    @column_pair_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column_A: pd.Series, column_B: pd.Series, _metrics: dict, **kw: Any) -> Any:
        pairs = _metrics["reference"]
        return pd.Series(
            [(a, b) in pairs for a, b in zip(column_A, column_B, strict=True)], index=column_A.index
        )

    @classmethod
    def _references(cls, metric: MetricConfiguration) -> dict[str, MetricConfiguration]:
        d = metric.metric_domain_kwargs
        columns = [d["column_A"], d["column_B"]]
        rows = metric.metric_value_kwargs["rows"]
        return {"reference": _on_rows(metric, rows, DISTINCT, columns=columns)}


class ColumnPairValuesFromRows(_ReadsRows, ColumnPairMapMetricProvider):
    condition_metric_name = "compat.column_pair_values.from_rows"
    condition_domain_keys = (*_PAIR_DOMAIN, "ignore_row_if")
    condition_value_keys = ("rows",)

    @column_pair_condition_partial(engine=PandasExecutionEngine)
    def _pandas(cls, column_A: pd.Series, column_B: pd.Series, _metrics: dict, **kw: Any) -> Any:
        return ~column_B.isin(_metrics["kept"]) | column_A.isin(_metrics["reference"])

    @classmethod
    def _references(cls, metric: MetricConfiguration) -> dict[str, MetricConfiguration]:
        d, rows = metric.metric_domain_kwargs, metric.metric_value_kwargs["rows"]
        return {
            "reference": _on_rows(metric, rows, DISTINCT, columns=[d["column_A"]]),
            "kept": _on_rows(metric, rows, DISTINCT, columns=[d["column_B"]]),
        }


class ColumnValuesShareOfRows(_ReadsRows, ColumnMapMetricProvider):
    condition_metric_name = "compat.column_values.share_of_rows"
    condition_value_keys = ("counted", "of", "share", "kept", "kept_share")

    @column_condition_partial(engine=PandasExecutionEngine)
    def _pandas(
        cls,
        column: pd.Series,
        _metrics: dict,
        share: dict,
        kept_share: dict | None = None,
        **kwargs: Any,
    ) -> pd.Series:
        have, total = _metrics["counted"], _metrics["total"]
        kept = _metrics.get("kept", frozenset())
        rule, kept_rule = Share(**share), Share(**(kept_share or share))
        return pd.Series(
            [
                have.get(v, 0) == (kept_rule if v in kept else rule).of(total.get(v, 0))
                for v in column
            ],
            index=column.index,
            dtype=bool,
        )

    @classmethod
    def _references(cls, metric: MetricConfiguration) -> dict[str, MetricConfiguration]:
        kw, column = metric.metric_value_kwargs, metric.metric_domain_kwargs["column"]
        deps = {
            "counted": _on_rows(metric, kw["counted"], VALUE_COUNTS, column=column),
            "total": _on_rows(metric, kw["of"], VALUE_COUNTS, column=column),
        }
        if kw.get("kept") is not None:
            deps["kept"] = _on_rows(metric, kw["kept"], DISTINCT, columns=[column])
        return deps


# ---- expectations ----------------------------------------------------------------------------


def _condition(value: Any) -> Any:
    """A row condition read back from a suite's JSON (a dict) as GX's condition object."""
    return deserialize_row_condition(value) if isinstance(value, dict) else value


def _share(value: Any) -> Any:
    """A share, checked as :class:`~compat.data.scenarios.Share` checks it, kept as its dict."""
    return None if value is None else Share(**value).model_dump()


class ExpectColumnValuesToBeInRows(ColumnMapExpectation):
    """Every value of ``column`` (in the rows ``row_condition`` selects) is a value of
    ``rows_column`` (default: the same column) in the rows ``rows`` selects: a subset."""

    rows: Rows
    rows_column: str | None = None

    map_metric = "compat.column_values.in_rows"
    success_keys = ("rows", "rows_column", "mostly")
    args_keys = ("column", "rows", "rows_column")

    _rows = pydantic.validator("rows", pre=True, allow_reuse=True)(_condition)


class ExpectColumnValuesToNotBeInRows(ExpectColumnValuesToBeInRows):
    """No value of ``column`` is a value of ``rows_column`` in the rows ``rows`` selects:
    disjoint sets."""

    map_metric = "compat.column_values.not_in_rows"


class ExpectColumnPairValuesToBeInRows(ColumnPairMapExpectation):
    """Every pair (``column_A``, ``column_B``) is a pair of the same columns in the rows ``rows``
    selects (a class at the same position of another class order)."""

    rows: Rows
    ignore_row_if: str = "both_values_are_missing"

    map_metric = "compat.column_pair_values.in_rows"
    success_keys = ("rows", "ignore_row_if", "mostly")
    args_keys = ("column_A", "column_B", "rows")

    _rows = pydantic.validator("rows", pre=True, allow_reuse=True)(_condition)


class ExpectColumnPairValuesToComeFromRows(ExpectColumnPairValuesToBeInRows):
    """Where the value of ``column_B`` is one the rows ``rows`` hold, the value of ``column_A``
    is one of theirs too (an item of a class the earlier task kept is one of its items)."""

    map_metric = "compat.column_pair_values.from_rows"


class ExpectColumnValuesToBeShareOfRows(ColumnMapExpectation):
    """Each value of ``column`` (a class) occurs in the rows ``counted`` selects exactly
    ``share`` of the times it occurs in the rows ``of`` selects; values that the rows ``kept``
    hold follow ``kept_share`` instead (replay memory). A share is
    :class:`~compat.data.scenarios.Share`'s fields, cut the way the scenarios cut."""

    counted: Rows
    of: Rows
    share: dict
    kept: Rows | None = None
    kept_share: dict | None = None

    map_metric = "compat.column_values.share_of_rows"
    success_keys = ("counted", "of", "share", "kept", "kept_share", "mostly")
    args_keys = ("column", "counted", "of", "share")

    _rows = pydantic.validator("counted", "of", "kept", pre=True, allow_reuse=True)(_condition)
    _shares = pydantic.validator("share", "kept_share", pre=True, allow_reuse=True)(_share)


class ExpectTableRowCountToBeShare(BatchExpectation):
    """The rows ``row_condition`` selects number exactly ``share`` of ``of`` (the training pool's
    class count, a suite parameter where it depends on the source)."""

    share: dict
    of: int | SuiteParameterDict
    row_condition: RowConditionType = None
    condition_parser: ConditionParser | None = None

    metric_dependencies = ("table.row_count",)
    domain_keys: ClassVar[tuple[str, ...]] = ("batch_id", "row_condition", "condition_parser")
    success_keys = ("share", "of")
    args_keys = ("share", "of")

    _shares = pydantic.validator("share", pre=True, allow_reuse=True)(_share)

    def _validate(
        self,
        metrics: dict,
        runtime_configuration: dict | None = None,
        execution_engine: Any = None,
    ) -> dict:
        kwargs = self._get_success_kwargs()
        of = int(kwargs["of"])
        expected = Share(**kwargs["share"]).of(of)
        observed = metrics["table.row_count"]
        return {
            "success": observed == expected,
            "result": {"observed_value": observed, "details": {"expected": expected, "of": of}},
        }


CUSTOM = (
    ExpectColumnValuesToBeInRows,
    ExpectColumnValuesToNotBeInRows,
    ExpectColumnPairValuesToBeInRows,
    ExpectColumnPairValuesToComeFromRows,
    ExpectColumnValuesToBeShareOfRows,
    ExpectTableRowCountToBeShare,
)
"""The expectation types compat adds to GX's, registered on import."""
