"""The registry read from an MLflow server's REST API, without mlflow: what
:class:`compat.registry.reader.RegistryReader` reads from an ``http(s)://`` tracking URI."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from compat.errors import InfrastructureError, NotFoundError
from compat.registry.mlflow_tables import Snapshot, record
from compat.registry.uris import first_line

REST_PAGE = 1000


class RestSource:
    """GET requests to an MLflow server's REST API, bounded as MLflow's client is (one try,
    ``MLFLOW_HTTP_REQUEST_TIMEOUT`` seconds), authenticated as it would be (the URI's
    ``user:password@``, ``MLFLOW_TRACKING_USERNAME``/``PASSWORD`` or ``MLFLOW_TRACKING_TOKEN``)."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        parts = urlsplit(reader.uri)
        self.base = urlunsplit((parts.scheme, parts.hostname or "", parts.path.rstrip("/"), "", ""))
        if parts.port is not None:
            netloc = f"{parts.hostname}:{parts.port}"
            self.base = urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self.query = parts.query
        self.headers = {"User-Agent": "compat"}
        user = parts.username or os.environ.get("MLFLOW_TRACKING_USERNAME")
        password = parts.password or os.environ.get("MLFLOW_TRACKING_PASSWORD")
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        if parts.username and parts.password is None and not token:
            token = parts.username  # https://<token>@host: a token as the user part
            user = None
        if user and password is not None:
            pair = base64.b64encode(f"{user}:{password}".encode()).decode()
            self.headers["Authorization"] = f"Basic {pair}"
        elif token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or 10)

    def get(self, endpoint: str, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON body of ``GET /api/2.0/mlflow/<endpoint>``; NotFoundError for MLflow's
        RESOURCE_DOES_NOT_EXIST, InfrastructureError (exit 5) for anything else."""
        import ssl
        import urllib.error
        import urllib.request

        query = "&".join(q for q in (self.query, urlencode(params)) if q)
        url = f"{self.base}/api/2.0/mlflow/{endpoint}?{query}"
        context = None
        if url.startswith("https://"):
            if os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() == "true":
                context = ssl._create_unverified_context()
            elif os.environ.get("MLFLOW_TRACKING_SERVER_CERT_PATH"):
                context = ssl.create_default_context(
                    cafile=os.environ["MLFLOW_TRACKING_SERVER_CERT_PATH"]
                )
        request = urllib.request.Request(url, headers=self.headers)
        safe = self.reader.safe_uri
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=context) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as err:
            body = _error_body(err)
            if body.get("error_code") == "RESOURCE_DOES_NOT_EXIST":
                raise NotFoundError(f"registry {safe}: {body.get('message', endpoint)}") from None
            what = body.get("message") or f"HTTP {err.code} {err.reason}"
            raise InfrastructureError(
                f"registry {safe} is unreachable: {endpoint}: {first_line(Exception(what))}"
            ) from None
        except (OSError, ValueError) as err:  # refused, timed out, TLS, not JSON
            raise InfrastructureError(
                f"registry {safe} is unreachable: {first_line(err)}"
            ) from None

    def pages(self, endpoint: str, params: dict[str, Any], key: str) -> Iterator[dict[str, Any]]:
        token = None
        while True:
            page = dict(params, max_results=REST_PAGE, **({"page_token": token} if token else {}))
            body = self.get(endpoint, page)
            yield from body.get(key, [])
            token = body.get("next_page_token")
            if not token:
                return

    def read(self) -> Snapshot:
        model = self.reader.model
        try:
            found = self.get("registered-models/get", {"name": model})["registered_model"]
        except NotFoundError:
            return Snapshot()
        aliases = {a["alias"]: str(a["version"]) for a in found.get("aliases", [])}
        versions = [
            record(
                mv["version"],
                mv.get("run_id"),
                mv.get("source"),
                mv.get("description"),
                mv.get("creation_timestamp"),
                {t["key"]: t.get("value", "") for t in mv.get("tags", [])},
                f"registry {self.reader.safe_uri}",
            )
            for mv in self.pages(
                "model-versions/search", {"filter": f"name='{model}'"}, "model_versions"
            )
        ]
        versions.sort(key=lambda r: int(r.mlflow_version))
        return Snapshot(exists=True, versions=versions, aliases=aliases)


def _error_body(err: Any) -> dict[str, Any]:
    try:
        body = json.loads(err.read() or b"{}")
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


__all__ = ["REST_PAGE", "RestSource"]
