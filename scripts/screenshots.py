"""Headless-Chromium screenshots of a compat registry in MLflow's UI (the README's pictures).

Takes the registered model page, one version's page and that version's run: its overview
(description = the verdict, datasets, metrics), its model-metrics tab (the training curves
first, then the few ``verdict/`` metrics), and its artifacts opened on ``verdict/matrix.html``
(checks, gains and every protocol's compatibility matrix as tables), in MLflow's
model-training view (``?workflowType=machine_learning``: MLflow 3 opens in its GenAI view).
It serves the registry with ``mlflow server`` on a local port unless ``--url`` names a
running one.

    python scripts/screenshots.py                       # registry/, the production version
    python scripts/screenshots.py --version v2 --out docs/img
    python scripts/screenshots.py --url http://127.0.0.1:5000 --registry registry

Needs Debian's chromium (``apt-get install chromium``; ``--chromium PATH`` for another one).
Exit codes: 0 done, 2 bad arguments, 3 no chromium / no such version, 5 the server did not
answer.

docs/img was made from a copy of the project after ``dvc repro`` (models/, contracts/,
splits/, data/, cache/, plots/, metrics/, params.yaml in a scratch folder): ``compat register``
of v1, v2, v2-scratch, v3, v3-scratch, then ``compat promote v1``, ``compat promote v2
--against v1``, ``compat promote v3 --against v2``, and this script (2026-12-06). The training
curves (``mlflow-run-metrics.png``, v3's run, the same weights) are kept from the set made before
the paragons changed: headless Chromium left those charts loading that time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

VIEW = "workflowType=machine_learning"


def fail(message: str, code: int) -> None:
    print(f"screenshots: {message}", file=sys.stderr)
    raise SystemExit(code)


def find_chromium(given: str | None) -> str:
    for name in [given] if given else ["chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(name) if name else None
        if path:
            return path
    fail(
        f"{given or 'chromium'} not found: install Debian's chromium (apt-get install chromium) "
        "or pass --chromium PATH",
        3,
    )
    raise AssertionError  # unreachable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    fail(f"{url}: the MLflow server did not answer within {seconds:.0f} s", 5)


def start_server(registry: Path, port: int) -> subprocess.Popen:
    db = (registry / "mlflow.db").resolve()
    if not db.is_file():
        fail(f"{db}: no registry here (compat register a version first, or pass --registry)", 3)
    mlflow = Path(sys.executable).with_name("mlflow")
    cmd = [str(mlflow) if mlflow.exists() else "mlflow", "server"]
    cmd += ["--backend-store-uri", f"sqlite:///{db}", "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def pages(tracking: str, model: str, version: str | None) -> dict[str, str]:
    """{file stem: UI route} for the model, the version and its run."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking, tracking)
    if version is None:
        alias = client.get_registered_model(model).aliases.get("production")
        if alias is None:
            fail(f"{model}: no production version; pass --version", 3)
        mv = client.get_model_version(model, alias)
    else:
        found = client.search_model_versions(
            f"name='{model}' and tags.`compat.version`='{version}'"
        )
        if not found:
            fail(f"{model}: version {version!r} is not registered", 3)
        mv = max(found, key=lambda m: int(m.version))
    run = client.get_run(mv.run_id)
    base = f"/experiments/{run.info.experiment_id}/runs/{mv.run_id}"
    return {
        "mlflow-model": f"/models/{model}",
        "mlflow-version": f"/models/{model}/versions/{mv.version}",
        "mlflow-run": base,
        "mlflow-run-metrics": f"{base}/model-metrics",
        "mlflow-run-artifacts": f"{base}/artifactPath/verdict/matrix.html",
    }


def shoot(chromium: str, url: str, out: Path, size: tuple[int, int], wait_ms: int) -> None:
    cmd = [
        # SwiftShader (software WebGL): without it headless Chromium draws no metric charts.
        chromium, "--headless=new", "--no-sandbox", "--use-angle=swiftshader",
        "--enable-unsafe-swiftshader", "--hide-scrollbars",
        "--no-first-run", "--disable-dev-shm-usage", f"--window-size={size[0]},{size[1]}",
        f"--virtual-time-budget={wait_ms}", f"--screenshot={out}", url,
    ]  # fmt: skip
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + 4 * wait_ms / 1000)
    except subprocess.TimeoutExpired:
        fail(f"{url}: chromium took too long", 5)
    if r.returncode != 0 or not out.is_file():
        fail(f"{url}: chromium failed: {(r.stderr or '').strip().splitlines()[-1:]}", 5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--registry", type=Path, default=Path("registry"))
    p.add_argument("--model", default="compat")
    p.add_argument("--version", default=None, help="compat version (default: production)")
    p.add_argument("--out", type=Path, default=Path("docs/img"))
    p.add_argument("--url", default=None, help="a running MLflow server (default: start one)")
    p.add_argument("--chromium", default=None)
    p.add_argument("--size", default="1700x1000", help="window WIDTHxHEIGHT")
    p.add_argument("--wait-ms", type=int, default=20000, help="page time before the shot")
    p.add_argument("--only", nargs="*", default=None, help="file stems to take (default: all)")
    args = p.parse_args(argv)
    chromium = find_chromium(args.chromium)
    try:
        size = tuple(int(x) for x in args.size.split("x"))
        assert len(size) == 2
    except (ValueError, AssertionError):
        fail(f"--size: {args.size!r} is not WIDTHxHEIGHT", 2)
    server = None
    url = args.url
    if url is None:
        port = free_port()
        server = start_server(args.registry, port)
        url = f"http://127.0.0.1:{port}"
    try:
        wait_for(url.rstrip("/"), 300)
        routes = pages(url, args.model, args.version)
        args.out.mkdir(parents=True, exist_ok=True)
        for stem, route in routes.items():
            if args.only and stem not in args.only:
                continue
            out = args.out / f"{stem}.png"
            # The version page is long: its model schema sits below the tags.
            tall = (size[0], size[1] * 2) if stem == "mlflow-version" else size
            shoot(chromium, f"{url.rstrip('/')}/#{route}?{VIEW}", out, tall, args.wait_ms)
            print(out)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
