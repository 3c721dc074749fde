"""Params of the ``data`` stage: which image source to use (the ``data:`` section of params.yaml)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from compat.data.render import Distortion

MAX_RENDER_BYTES = 8 * 2**30  # the embedded source's rendered uint8 array


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    size: int = Field(32, ge=8, le=112, description="images are resized to size x size")
    channels: Literal[1, 3] = 1


class EmbeddedData(_Base):
    """The default: kanji rendered offline from the installed KanjiVG strokes."""

    kind: Literal["embedded"] = "embedded"
    classes: int = Field(2000, ge=2, le=6000)
    images_per_class: int = Field(20, ge=2)
    seed: int = Field(0, ge=0, le=2**32 - 1, description="random seed (0 .. 2**32 - 1)")
    max_strokes: int = Field(30, ge=1, le=1000)
    distortion: Distortion = Distortion()
    workers: int | None = Field(
        None, ge=1, le=4096, description="render processes; default: all cores"
    )
    cache: str | None = Field(
        None, description="render cache folder; default $COMPAT_CACHE_DIR or ~/.cache/compat"
    )

    @model_validator(mode="after")
    def _fits(self) -> EmbeddedData:
        # The rendered images are held in memory (and cached on disk) as one uint8 array.
        need = self.classes * self.images_per_class * self.size * self.size * self.channels
        if need > MAX_RENDER_BYTES:
            raise ValueError(
                f"images_per_class: {self.classes} classes x {self.images_per_class} images of "
                f"{self.size}x{self.size}x{self.channels} are {need / 2**30:.1f} GiB to render, "
                f"over the {MAX_RENDER_BYTES / 2**30:.0f} GiB limit: lower images_per_class, "
                "classes or size"
            )
        return self


class FolderData(_Base):
    """An image folder: one sub-folder per class under ``root``."""

    kind: Literal["folder"]
    root: str
    extensions: list[str] = [".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"]


class ManifestData(_Base):
    """A CSV manifest with the columns ``path,label[,group]``; paths resolve under ``root``."""

    kind: Literal["manifest"]
    manifest: str
    root: str | None = Field(None, description="default: the manifest's folder")


KINDS = ("embedded", "folder", "manifest")


def _kind(value: Any) -> Any:
    return value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)


# Discriminated by ``kind``; a missing or unknown kind says which kinds exist (pydantic's own
# words, "Unable to extract tag using discriminator", name neither the key nor the choices).
DataParams = Annotated[
    Annotated[EmbeddedData, Tag("embedded")]
    | Annotated[FolderData, Tag("folder")]
    | Annotated[ManifestData, Tag("manifest")],
    Discriminator(
        _kind,
        custom_error_type="data_kind",
        custom_error_message=f"kind: expected one of {', '.join(KINDS)}",
        custom_error_context={},
    ),
]
