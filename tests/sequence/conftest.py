"""A tiny sequence project (data, class-incremental split, a trained hoc chain), built once."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

# --import-mode=importlib: this folder's helper module is imported by name, so put it on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent))


TINY = dict(backbone="tiny", dim=15, head="dsimplex", method="hoc", batch_size=16, epochs=2)


@pytest.fixture(scope="session")
def tiny_sequence(tiny_source, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """experiments/sequence's layout in small: data/, splits/, models/hoc-t1..t3 (t2 fine-tuned
    from t1; t3 a replacement trained from scratch on t3-all with another backbone),
    evaluate.yaml."""
    from compat.data.scenarios import Incremental
    from compat.data.split import EvalSplit, SplitParams, build_split, write_split
    from compat.train import TrainConfig, train_version

    root = tmp_path_factory.mktemp("sequence")
    shutil.copytree(tiny_source.root, root / "data")  # the embedded source's own folder
    params = SplitParams(
        eval=EvalSplit(classes=16, pairs=100, open_set_fraction=0.0),
        scenarios=[
            Incremental(
                kind="incremental", initial=8, per_task=4, tasks=3, memory=2, cumulative=[3]
            )
        ],
    )
    manifests, ev = build_split(tiny_source, params)
    write_split(root / "splits", manifests, ev)
    chain = ["hoc-t1", "hoc-t2", "hoc-t3"]
    configs = {
        "hoc-t1": TrainConfig(**TINY, split="t1", seed=1),
        "hoc-t2": TrainConfig(**TINY, split="t2", parent="hoc-t1", init="parent", seed=2),
        # the replacement: from scratch on everything seen, on another backbone, same d-Simplex
        "hoc-t3": TrainConfig(
            **{**TINY, "backbone": "small-cnn"}, split="t3-all", parent="hoc-t2", seed=3
        ),
    }
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for version in chain:
            cfg = configs[version]
            train_version(
                version, cfg, source=tiny_source, manifest=manifests[cfg.split],
                models_dir=root / "models", checkpoint_dir=root / "ck" / version, quiet=True,
            )  # fmt: skip
    finally:
        torch.set_num_threads(before)
    (root / "evaluate.yaml").write_text(
        yaml.safe_dump({"hoc": {"chain": chain, "protocols": ["identification"]}})
    )
    return root
