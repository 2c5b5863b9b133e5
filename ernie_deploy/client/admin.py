"""Calls to a server's model-repository and model-config APIs (index, load, unload, config) with the admin key.

A server started by ernie-deploy answers these only to requests carrying the header ADMIN_KEY_HEADER with its
key (ernie_deploy.core.admin_key). This client sends it over gRPC (`host:port`) or HTTP (`http://host:port`),
and turns a refusal into an ErnieDeployError that says whether the key was missing or wrong. Over gRPC with TLS
(`tls`), the way every client of this project connects (grpc_client.grpc_client).
"""

from __future__ import annotations

import json
import os

from ernie_deploy.client.grpc_client import grpc_client
from ernie_deploy.core.admin_key import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_FILE_ENV,
    ADMIN_KEY_HEADER,
    AdminKey,
    admin_key_from,
    check_admin_key,
)
from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL
from ernie_deploy.core.errors import BadOptionsError, BadRepositoryError, ErnieDeployError, ServerNotReadyError
from ernie_deploy.core.tls import Tls

# Triton 2.51's answer to a request without the right header: HTTP 403 "This API is restricted, expecting
# header '<name>'", gRPC UNAVAILABLE "This protocol is restricted, expecting header 'triton-grpc-protocol-<name>'"
# (tests/test_admin_key.py checks both on the pip server). Over gRPC the code alone cannot tell a refusal from
# a server that is down, so the text decides.
_REFUSED = "is restricted, expecting header"
# Triton's answer to a load of a model that is in none of the folders it serves (measured on 2.51): the server runs
# another repository than the caller wrote to, or the model was never built there.
_NOT_IN_REPOSITORY = "failed to poll from model repository"


class RepositoryAdmin:
    """The repository API of one server. `key`: the admin key (a string, an AdminKey, or None to send none)."""

    def __init__(
        self,
        url: str = DEFAULT_GRPC_URL,
        key: str | AdminKey | None = None,
        *,
        timeout: float = 60.0,
        tls: Tls | None = None,
    ):
        self.url = url
        self.key = check_admin_key(key, "the key argument") if isinstance(key, str) else key
        self.timeout = timeout
        self.http = url.startswith(("http://", "https://"))
        if self.http:
            import tritonclient.http as httpclient

            if tls is not None:
                raise BadOptionsError(
                    f"TLS options were given for the HTTP URL {url}", "give the server's gRPC address (host:port)"
                )
            self._client = httpclient.InferenceServerClient(
                url.split("://", 1)[1], ssl=url.startswith("https://"), network_timeout=timeout
            )
        else:
            self._client = grpc_client(url, tls)

    @classmethod
    def from_env(cls, url: str = DEFAULT_GRPC_URL, key_file: str | os.PathLike | None = None, **kw) -> RepositoryAdmin:
        """With the key from `key_file`, else $ERNIE_DEPLOY_ADMIN_KEY_FILE, else $ERNIE_DEPLOY_ADMIN_KEY (or none)."""
        return cls(url, admin_key_from(key_file), **kw)

    def _headers(self) -> dict[str, str] | None:
        return self.key.headers(grpc=not self.http) if self.key is not None else None

    def _call(self, what: str, fn, *args, **kw):
        from tritonclient.utils import InferenceServerException

        if not self.http:
            kw["client_timeout"] = self.timeout
        try:
            return fn(*args, headers=self._headers(), **kw)
        except InferenceServerException as exc:
            raise self._error(what, exc) from None

    def _error(self, what: str, exc) -> ErnieDeployError:
        message = exc.message() or str(exc)
        if _REFUSED not in message:
            failure = BadRepositoryError if _NOT_IN_REPOSITORY in message else ServerNotReadyError
            return failure(
                f"{what} failed on {self.url}: {message}", "check the server is up and the model name is right"
            )
        if self.key is None:
            return BadOptionsError(
                f"{what}: {self.url} keeps its model-repository API behind an admin key, and none was sent",
                f"set {ADMIN_KEY_ENV} (or {ADMIN_KEY_FILE_ENV}, or --admin-key-file) to the key the server was "
                f"started with; it is sent in the header {ADMIN_KEY_HEADER}",
            )
        return BadOptionsError(
            f"{what}: {self.url} refused the admin key from {self.key.source} (not the key it was started with)",
            "use the server's key: the ERNIE_DEPLOY_ADMIN_KEY / admin key file it was started with, or on "
            "Kubernetes the Secret its Deployment mounts",
        )

    def index(self, ready: bool = False) -> list[dict]:
        """The repository's models: [{"name", "version", "state", "reason"}, ...] (ready ones only if `ready`)."""
        c = self._client
        if self.http:
            models = self._call("repository index", c.get_model_repository_index)
        else:
            models = self._call("repository index", c.get_model_repository_index, as_json=True).get("models", [])
        return [m for m in models if m.get("state") == "READY"] if ready else models

    def load(self, model: str, config: dict | str | None = None) -> None:
        """Load (or reload) `model`; `config` replaces its config.pbtxt for this load (JSON, as Triton takes it)."""
        if isinstance(config, dict):
            config = json.dumps(config)
        self._call(f"load {model!r}", self._client.load_model, model, config=config)

    def unload(self, model: str, unload_dependents: bool = False) -> None:
        self._call(f"unload {model!r}", self._client.unload_model, model, unload_dependents=unload_dependents)

    def config(self, model: str) -> dict:
        """The configuration the server runs `model` with (Triton's JSON form)."""
        c = self._client
        if self.http:
            return self._call(f"config of {model!r}", c.get_model_config, model)
        return self._call(f"config of {model!r}", c.get_model_config, model, as_json=True)["config"]

    def is_ready(self, model: str) -> bool:
        """Model readiness is a health call: it needs no key."""
        return self._client.is_model_ready(model)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> RepositoryAdmin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
