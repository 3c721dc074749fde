"""``compat promote`` with a forward criterion: psi is found in models/<version>/upgrade/."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from compat.cli.main import app

runner = CliRunner()

FORWARD = """\
  - protocol: identification
    metric: top1
    require: forward > cross
"""


def _fit_psi(project, folder, source="v1", target="v2"):
    """psi fitted on the registered v1 -> v2 pairs themselves: this tests the gate's plumbing,
    not how well psi generalises (tests/backfill does that)."""
    import torch

    from compat.maps.psi import save_upgrade
    from compat.maps.psi_config import UpgradeConfig
    from compat.maps.psi_fit import fit_upgrade

    torch.set_num_threads(1)
    old, new = project.embeddings(1.5, 1), project.embeddings(0.8, 2)
    # Nothing held out (the plumbing test), so the held-out refusal is off explicitly.
    cfg = UpgradeConfig(
        hidden=64, epochs=60, batch_size=32, lr=3e-3, device="cpu", val_fraction=0.0, refuse=False
    )
    fit = fit_upgrade(old, new, cfg, progress=False, quiet=True)
    save_upgrade(folder, fit.psi, {"from": source, "to": target, "loss": "mse"})


def test_forward_criterion_gates_with_psi_from_models(project):
    project.contract("v1")
    path = project.contract("v2", parent="v1", confidence=None)
    path.write_text(path.read_text().replace("criteria:\n", "criteria:\n" + FORWARD))
    for v, (noise, seed) in {"v1": (1.5, 1), "v2": (0.8, 2)}.items():
        r = runner.invoke(
            app,
            [
                "register",
                v,
                "--embeddings",
                str(project.bundle(v, project.embeddings(noise, seed))),
            ],
        )
        assert r.exit_code == 0, r.output
    assert runner.invoke(app, ["promote", "v1"]).exit_code == 0

    r = runner.invoke(app, ["promote", "v2", "--against", "v1", "--dry-run", "--json"])
    assert r.exit_code == 3, r.output  # no psi in models/v2/upgrade
    assert "upgrade module card not found" in r.stderr

    _fit_psi(project, project.root / "models" / "v2" / "upgrade")
    r = runner.invoke(app, ["promote", "v2", "--against", "v1", "--json"])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    fwd = [c for c in report["criteria"] if c["require"] == "forward > cross"]
    assert len(fwd) == 1 and fwd[0]["passed"] and fwd[0]["lhs"] == ["v2", "psi(v1)"]
    assert report["upgrade"]["from"] == "v1"
    assert "psi(v1)" in report["matrix"]["identification"]["top1"]["v2"]

    from compat.registry.store import Registry

    tags = Registry().get("v2").tags
    assert tags["compat.check.v1.identification.top1"].startswith("pass")
    assert tags["compat.check.v1.identification.top1.forward"].startswith("pass")
