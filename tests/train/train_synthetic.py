"""Tiny synthetic image sets for training tests: each class is a random blob pattern."""

from __future__ import annotations

import numpy as np


def make_images(
    num_classes: int = 6,
    per_class: int = 8,
    size: int = 16,
    channels: int = 1,
    seed: int = 0,
    noise: float = 30.0,
) -> tuple[np.ndarray, list[str]]:
    """uint8 (num_classes * per_class, size, size, channels) images and class-name labels."""
    rng = np.random.default_rng(seed)
    templates = rng.uniform(0, 255, size=(num_classes, size // 4, size // 4, channels))
    templates = templates.repeat(4, axis=1).repeat(4, axis=2)
    images, labels = [], []
    for c in range(num_classes):
        for _ in range(per_class):
            img = templates[c] + rng.normal(0, noise, size=templates[c].shape)
            img = np.roll(img, rng.integers(-1, 2, size=2), axis=(0, 1))
            images.append(np.clip(img, 0, 255).astype(np.uint8))
            labels.append(f"c{c:03d}")
    return np.stack(images), labels


def make_project(root, params: dict, num_classes: int = 4, per_class: int = 8, size: int = 8):
    """A tmp project for stages/train.py: an image folder source, ``splits/v1.json``, params.yaml.

    Returns the Source. Uses the data package's public API (folder source), so the stage reads
    exactly what it reads in the pipeline.
    """
    from pathlib import Path

    import yaml
    from PIL import Image

    from compat.data.config import FolderData
    from compat.data.sources import build_source
    from compat.data.split import TrainManifest
    from compat.io import fingerprint, write_json

    root = Path(root)
    images, labels = make_images(num_classes=num_classes, per_class=per_class, size=size)
    items = []
    for k, (img, lab) in enumerate(zip(images, labels, strict=True)):
        path = root / "imgs" / lab / f"{k:04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img[:, :, 0]).save(path)
        items.append(f"{lab}/{k:04d}.png")
    source = build_source(
        FolderData(kind="folder", root=str(root / "imgs"), size=size), root / "data"
    )
    body = {
        "name": "v1",
        "scenario": "test",
        "source_fingerprint": source.fingerprint,
        "classes": sorted(set(labels)),
        "items": items,
        "labels": labels,
    }
    manifest = TrainManifest(**body, fingerprint=fingerprint(body))
    write_json(root / "splits" / "v1.json", manifest.model_dump())
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return source
