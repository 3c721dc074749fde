"""The ``evaluate:`` section of params.yaml (import-light: pydantic only, no torch).

Example::

    evaluate:
      chain: [v1, v2, v3]           # versions in deployment order
      paragon: {v2: v2-paragon}     # version -> its paragon (trained without compatibility)
      protocols: [identification, open-set, verification]
      bootstrap: 1000
      seed: 0
      forward: {v2: models/v2/upgrade}   # optional: M(new, psi(old)) and partial backfill
      adapters: {v3-paragon-to-v1: maps/v3-paragon-to-v1}   # optional: M(adapt(new), old)
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from compat.compare.bootstrap import MAX_RESAMPLES, MAX_SEED
from compat.names import Name


def _protocol_names() -> list[str]:
    """The protocol catalog's names (:data:`compat.evaluate.protocols.PROTOCOLS`), imported
    when first needed so that reading params stays light (the catalog is torch-free)."""
    from compat.evaluate.protocols import protocol_names

    return protocol_names()


def __getattr__(name: str) -> Any:
    # PROTOCOL_NAMES stays importable, but is the catalog's list, not a copy of it.
    if name == "PROTOCOL_NAMES":
        return tuple(_protocol_names())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class EvaluateConfig(BaseModel):
    """Parameters of the ``evaluate`` stage; an unknown key is an error, not a silent default."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    chain: list[Name] = Field(
        min_length=1, description="versions in deployment order; M[q][g] for g at or before q"
    )
    paragon: dict[Name, Name] = Field(
        default_factory=dict,
        description="version -> its paragon (new* trained without compatibility, self-tested)",
    )
    protocols: list[str] = Field(default_factory=_protocol_names)
    bootstrap: int = Field(
        1000, ge=0, le=MAX_RESAMPLES, description="bootstrap resamples over queries; 0: none"
    )
    confidence: float = Field(0.95, gt=0.0, lt=1.0, description="level of reported intervals")
    seed: int = Field(0, ge=0, le=MAX_SEED, description="random seed (0 .. 2**32 - 1)")
    full_square: bool = Field(False, description="also evaluate old queries on newer galleries")
    strict_ac: bool = Field(True, description="AC counts M[i][j] > M[j][j] (False: >=)")
    batch_size: int = Field(
        512, ge=1, le=1_000_000, description="images per forward pass when embedding"
    )
    chunk_size: int | None = Field(
        None, ge=1, le=10_000_000, description="queries per score chunk (auto)"
    )
    device: str | None = Field(
        None,
        pattern=r"^(auto|cpu|cuda(:[0-9]+)?)$",
        description="cpu, cuda, cuda:N or auto; default: CUDA if present",
    )
    top_k: list[int] = Field(default_factory=lambda: [1, 5, 10], min_length=1)
    map_k: int = Field(100, ge=1, le=1_000_000)
    gallery: Literal["instance", "template"] = Field(
        "instance",
        description="identification searches every gallery item (instance) or one template per "
        "class, the mean of its gallery embeddings re-normalised (template)",
    )
    far: list[float] = Field(default_factory=lambda: [0.1, 0.01, 0.001], min_length=1)
    fpir: list[float] = Field(default_factory=lambda: [0.1, 0.01], min_length=1)
    cmc_ranks: int = Field(20, ge=1, le=100_000, description="ranks in the CMC plot data")
    forward: dict[Name, str] = Field(
        default_factory=dict,
        description="version (of the chain, or a paragon) -> folder of its upgrade module psi "
        "(e.g. models/v2/upgrade): also report M(new, psi(old)) and the partial-backfill curve "
        "(compat.evaluate.forward)",
    )
    adapters: dict[Name, str] = Field(
        default_factory=dict,
        description="map name -> folder of a query adapter (compat.maps, e.g. "
        "maps/v3-paragon-to-v1): also report M(adapt(new), old) beside M(new, old), M(old, old) "
        "and M(new, new) (the evaluate-adapters stage, compat.evaluate.adapted, "
        "metrics/adapted.json)",
    )
    counterpart: dict[Name, Name] = Field(
        default_factory=dict,
        description="a model trained elsewhere (an adapter's new version) -> the chain version "
        "BCT trained on the same data: the adapted cells are set beside M(that version, old) "
        "and BCT's update gain is measured against the model (the paper's paragon); default: "
        "the version whose paragon it is",
    )
    backfill_fractions: list[float] = Field(
        default_factory=lambda: [0.0, 0.25, 0.5, 0.75, 1.0],
        min_length=1,
        description="shares of the gallery upgraded by psi along the partial-backfill curve",
    )

    @field_validator("chain")
    @classmethod
    def _unique_chain(cls, chain: list[str]) -> list[str]:
        dup = sorted({v for v in chain if chain.count(v) > 1})
        if dup:
            raise ValueError(f"versions listed twice: {', '.join(dup)}")
        return chain

    @field_validator("protocols")
    @classmethod
    def _known_protocols(cls, names: list[str]) -> list[str]:
        known = _protocol_names()
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown protocol {unknown[0]!r}; known: {', '.join(known)}")
        if len(set(names)) != len(names):
            raise ValueError("a protocol is listed twice")
        return names

    @field_validator("top_k")
    @classmethod
    def _positive_ks(cls, ks: list[int]) -> list[int]:
        if any(k < 1 or k > 1_000_000 for k in ks):
            raise ValueError("top-k values must lie in 1 .. 1,000,000")
        return ks

    @field_validator("far", "fpir")
    @classmethod
    def _rates(cls, rates: list[float]) -> list[float]:
        if any(not 0.0 < r < 1.0 for r in rates):
            raise ValueError("rates must lie strictly between 0 and 1")
        return rates

    @field_validator("backfill_fractions")
    @classmethod
    def _fractions(cls, fractions: list[float]) -> list[float]:
        if any(not 0.0 <= f <= 1.0 for f in fractions):
            raise ValueError("fractions must lie in [0, 1]")
        if sorted(set(fractions)) != list(fractions):
            raise ValueError("fractions must be increasing, each listed once")
        return fractions

    @model_validator(mode="after")
    def _paragons_name_chain_versions(self) -> EvaluateConfig:
        for version, paragon in self.paragon.items():
            if version not in self.chain:
                raise ValueError(f"paragon: {version!r} is not in the chain {self.chain}")
            if paragon == version:
                raise ValueError(f"paragon: {version!r} cannot be its own paragon")
        for model, version in self.counterpart.items():
            if version not in self.chain or model in self.chain:
                raise ValueError(
                    f"counterpart: {model!r} -> {version!r}: a model outside the chain "
                    f"{self.chain} and a chain version"
                )
        for version in self.forward:
            if version not in self.chain and version not in self.paragon.values():
                raise ValueError(
                    f"forward: {version!r} is neither in the chain {self.chain} nor a paragon"
                )
        return self

    def versions(self) -> list[str]:
        """Every version to embed: the chain, then the paragons (each once)."""
        out = list(self.chain)
        for p in self.paragon.values():
            if p not in out:
                out.append(p)
        return out

    def protocol_options(self) -> dict[str, object]:
        return {
            "ks": tuple(self.top_k),
            "map_k": self.map_k,
            "gallery": self.gallery,
            "cmc_ranks": self.cmc_ranks,
            "fars": tuple(self.far),
            "fpirs": tuple(self.fpir),
            "seed": self.seed,
        }


def read_evaluate_section(
    path: str | os.PathLike[str], section: str = "evaluate"
) -> EvaluateConfig | None:
    """A params file's ``section`` validated as an :class:`EvaluateConfig` (errors name the file
    and the dotted field); None when the file has no such section. Only this section is read, so
    a file whose other sections belong to another pipeline is fine."""
    from compat.config import read_section

    return read_section(path, section, EvaluateConfig, default=None)
