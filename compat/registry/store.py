"""The MLflow model registry as compat uses it (docs/design.md, Registry conventions).

One registered model (default ``compat``) holds every version; a compat version name (``v2``) is
the tag ``compat.version`` on an MLflow model version, because MLflow reserves ``v<N>`` aliases.
The serving version is the alias ``production``. Weights are plain artifacts (safetensors + card),
never pickled models.

The default store is ``sqlite:///<abs>/registry/mlflow.db`` with artifacts in
``registry/artifacts``; ``MLFLOW_TRACKING_URI`` selects a shared server instead. mlflow is
imported lazily: ``import mlflow`` costs over a second and ``compat --help`` must stay fast.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compat.errors import BadInputError, InfrastructureError, NotFoundError

TAG_PREFIX = "compat."
VERSION_TAG = "compat.version"
PRODUCTION = "production"
DEFAULT_MODEL = "compat"
EXPERIMENT = "compat"


@dataclass
class VersionRecord:
    """One registered compat version, as read back from the registry."""

    name: str
    mlflow_version: str
    run_id: str | None
    source: str
    tags: dict[str, str] = field(default_factory=dict)
    description: str = ""
    aliases: list[str] = field(default_factory=list)
    created: int = 0

    @property
    def status(self) -> str:
        return self.tags.get("compat.status", "candidate")

    @property
    def parent(self) -> str | None:
        p = self.tags.get("compat.parent", "")
        return p or None


def _quiet_mlflow_env() -> None:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    # Fail fast on an unreachable server: the gate must answer with exit code 5, not hang.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


class Registry:
    """A thin, typed wrapper over ``MlflowClient`` speaking compat's vocabulary."""

    def __init__(
        self,
        uri: str | None = None,
        root: str | os.PathLike[str] = "registry",
        model: str = DEFAULT_MODEL,
    ) -> None:
        self.root = Path(root).resolve()
        self.uri = (
            uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.root / 'mlflow.db'}"
        )
        self.model = model
        self._client: Any = None

    @property
    def is_local(self) -> bool:
        return self.uri.startswith("sqlite:///") and self.uri.endswith(str(self.root / "mlflow.db"))

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._connect()
        return self._client

    def _connect(self) -> Any:
        _quiet_mlflow_env()
        from filelock import FileLock

        self.root.mkdir(parents=True, exist_ok=True)
        try:
            import mlflow
            from mlflow import MlflowClient

            # Several processes touching a fresh sqlite store at once race on MLflow's schema
            # migration; a file lock serialises first use.
            with FileLock(str(self.root / ".schema.lock"), timeout=300):
                mlflow.set_tracking_uri(self.uri)
                mlflow.set_registry_uri(self.uri)
                client = MlflowClient(self.uri, self.uri)
                if client.get_experiment_by_name(EXPERIMENT) is None:
                    location = (self.root / "artifacts").as_uri() if self.is_local else None
                    try:
                        client.create_experiment(EXPERIMENT, artifact_location=location)
                    except Exception:  # another process created it between our check and create
                        if client.get_experiment_by_name(EXPERIMENT) is None:
                            raise
                try:
                    client.get_registered_model(self.model)
                except Exception:
                    try:
                        client.create_registered_model(
                            self.model,
                            description="Embedding model versions gated by compat contracts.",
                        )
                    except Exception:
                        client.get_registered_model(self.model)
        except Exception as err:  # MLflow raises many types for "cannot reach the store"
            raise InfrastructureError(
                f"registry {self.uri} is unreachable: {_short(err)}"
            ) from None
        return client

    def call(self, fn: str, *args: Any, **kwargs: Any) -> Any:
        """Call an MlflowClient method; connection failures become InfrastructureError (exit 5)."""
        try:
            return getattr(self.client, fn)(*args, **kwargs)
        except InfrastructureError:
            raise
        except Exception as err:
            from mlflow.exceptions import MlflowException

            code = getattr(err, "error_code", "") if isinstance(err, MlflowException) else ""
            if code == "RESOURCE_DOES_NOT_EXIST":
                raise NotFoundError(f"registry {self.uri}: {fn}: {_short(err)}") from None
            if code == "INVALID_PARAMETER_VALUE":
                raise BadInputError(f"registry {self.uri}: {fn}: {_short(err)}") from None
            raise InfrastructureError(f"registry {self.uri}: {fn} failed: {_short(err)}") from None

    @property
    def experiment_id(self) -> str:
        return self.call("get_experiment_by_name", EXPERIMENT).experiment_id

    # --- versions -------------------------------------------------------------------------

    def _record(self, mv: Any) -> VersionRecord:
        return VersionRecord(
            name=mv.tags.get(VERSION_TAG, f"mlflow-{mv.version}"),
            mlflow_version=str(mv.version),
            run_id=mv.run_id,
            source=mv.source,
            tags=dict(mv.tags),
            description=mv.description or "",
            aliases=list(getattr(mv, "aliases", []) or []),
            created=int(mv.creation_timestamp or 0),
        )

    def versions(self) -> list[VersionRecord]:
        """Every registered compat version, oldest first (search returns no aliases)."""
        mvs = self.call("search_model_versions", f"name='{self.model}'")
        records = [self._record(mv) for mv in mvs if VERSION_TAG in mv.tags]
        prod = self.production_mlflow_version()
        for r in records:
            r.aliases = [PRODUCTION] if r.mlflow_version == prod else []
        return sorted(records, key=lambda r: int(r.mlflow_version))

    def find(self, version: str) -> VersionRecord | None:
        mvs = self.call(
            "search_model_versions", f"name='{self.model}' and tags.`{VERSION_TAG}`='{version}'"
        )
        if not mvs:
            return None
        newest = max(mvs, key=lambda mv: int(mv.version))
        return self._record(self.call("get_model_version", self.model, newest.version))

    def get(self, version: str) -> VersionRecord:
        rec = self.find(version)
        if rec is None:
            raise NotFoundError(
                f"version {version!r} is not registered in {self.uri} (run: compat register {version})"
            )
        return rec

    def set_tags(self, rec: VersionRecord, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.call("set_model_version_tag", self.model, rec.mlflow_version, key, str(value))
            rec.tags[key] = str(value)

    def set_description(self, rec: VersionRecord, text: str) -> None:
        self.call("update_model_version", self.model, rec.mlflow_version, description=text)

    # --- the production alias ---------------------------------------------------------------

    def production_mlflow_version(self) -> str | None:
        """The MLflow version the ``production`` alias points at; None only when it is unset.

        The registered model's alias map is read, which is simply empty when no alias is set:
        a store that cannot be read raises (InfrastructureError, exit 5) and is never taken
        for "unset" (MLflow raises the same exception type for a locked sqlite store as for a
        missing alias, so reading the alias itself could not tell the two apart).
        """
        aliases = self.call("get_registered_model", self.model).aliases or {}
        version = aliases.get(PRODUCTION)
        return None if version is None else str(version)

    def production(self) -> str | None:
        """The compat version the ``production`` alias points at, or None."""
        mv = self.production_mlflow_version()
        if mv is None:
            return None
        return self.call("get_model_version", self.model, mv).tags.get(VERSION_TAG)

    def set_production(self, rec: VersionRecord) -> None:
        self.call("set_registered_model_alias", self.model, PRODUCTION, rec.mlflow_version)


def tag_key(*parts: str) -> str:
    """A tag key from metric names: MLflow keys allow no ``@`` or ``=`` (tar@far=0.1 -> tar/far:0.1)."""
    return ".".join(p.replace("@", "/").replace("=", ":") for p in parts)


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return (text[0] if text else type(err).__name__)[:300]
