"""docs/python-api.md's snippet runs as written, and it trains a compatible model."""

from __future__ import annotations

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def python_api_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert len(blocks) == 1, "docs/python-api.md holds one python block"
    return blocks[0]


def test_readme_python_api_snippet_trains_with_bct(capsys):
    namespace: dict = {}
    exec(compile(python_api_snippet(), str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert re.fullmatch(r"loss [0-9.]+; old classifier on new embeddings: [0-9]+%\n", printed)
    ns = namespace
    with torch.no_grad():
        z = ns["new_model"](ns["images"])
        old_logits = z @ ns["w_old"].T + ns["b_old"]
        new_logits = ns["new_fc"](z)
    labels = ns["labels"]
    # the old classifier (with its synthesized rows) recognises the new model's embeddings
    assert (old_logits.argmax(1) == labels).float().mean() > 0.5  # chance: 0.1
    assert (new_logits.argmax(1) == labels).float().mean() > 0.5
    assert not any(p.requires_grad for p in ns["old_fc"].parameters())
