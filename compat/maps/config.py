"""How a map is fitted and checked (import-light: pydantic only, no torch).

:class:`CheckConfig` holds what every kind shares: the held-out share, the refusal rule's
confidence, margin and bootstrap resamples, the seed. :class:`BlendParams` is a query blend's
(:mod:`compat.maps.blend`). Each kind's own parameters are a model in
its module (:class:`compat.maps.procrustes.ProcrustesParams`, ...). All refuse unknown keys and
NaN or infinite numbers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from compat.compare.bootstrap import DEFAULT_RESAMPLES, MAX_RESAMPLES, MAX_SEED


class Params(BaseModel):
    """Base of every map parameter model: unknown keys and NaN/inf are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class CheckConfig(Params):
    """The held-out check every map passes before it is kept (:mod:`compat.maps.check`)."""

    val_fraction: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="held out to check the map: this share of the classes (of the rows "
        "without labels or with too few classes); the map never sees them",
    )
    confidence: float = Field(
        0.95,
        gt=0,
        lt=1,
        description="the map is kept only if the one-sided paired-bootstrap lower bound of its "
        "held-out top-1 gain over the baseline at this level is above min_gain (the gate's rule)",
    )
    min_gain: float = Field(
        0.0,
        ge=0,
        lt=1,
        description="held-out top-1 the map must add over its baseline to be kept (below 1: "
        "top-1 is a share, no gain reaches 1)",
    )
    resamples: int = Field(
        DEFAULT_RESAMPLES,
        ge=1,
        le=MAX_RESAMPLES,
        description="bootstrap resamples of the held-out queries",
    )
    near_chance: float = Field(
        2.0,
        ge=1,
        description="with labels, raw rows whose top-1 lower bound (at confidence) is at most "
        "this many times chance count as an incompatible pair: the map must then beat the old "
        "model's self test instead",
    )
    refuse: bool = Field(True, description="refuse a map that does not beat its baseline")
    seed: int = Field(
        0, ge=0, le=MAX_SEED, description="seeds the held-out split, the bootstrap and the fit"
    )


class BlendParams(Params):
    """How a query blend is fitted (the ``blend`` of an ``adapt`` entry)."""

    method: Literal["slerp"] = Field("slerp", description="interpolation on the sphere (Eq. 1)")
    grid: int = Field(
        11, ge=2, le=101, description="weights tried, equally spaced in [0, 1] (11: 0, 0.1, ..)"
    )
    weight: float | None = Field(
        None, ge=0, le=1, description="a fixed weight instead of one selected on held-out classes"
    )


__all__ = ["BlendParams", "CheckConfig", "Params"]
