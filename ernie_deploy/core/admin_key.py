"""The admin key: the secret that guards Triton's model-repository and model-config APIs.

A server started by ernie-deploy (the launcher, the image's entrypoint, the Kubernetes Deployment)
answers load, unload, the repository index and model configs only to requests that carry the
header ADMIN_KEY_HEADER with this key; inference, health, metadata and statistics stay open.

The key is a secret and comes from the environment the server runs in, never from the repository:
a file (a Docker or Kubernetes secret mount; --admin-key-file or ERNIE_DEPLOY_ADMIN_KEY_FILE),
else the variable ERNIE_DEPLOY_ADMIN_KEY. Standard library only: the server, the clients and the
probe all read it.
"""

from __future__ import annotations

import os
import re
import secrets
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import atomic_path

# gRPC metadata keys must be lowercase; HTTP header names are case-insensitive, so one spelling serves both.
ADMIN_KEY_HEADER = "ernie-deploy-admin-key"
# Over gRPC Triton expects the header it was given with this prefix (its grpc server code; the pip server
# 2.51 names it in the refusal: "expecting header 'triton-grpc-protocol-ernie-deploy-admin-key'").
GRPC_ADMIN_KEY_HEADER = "triton-grpc-protocol-" + ADMIN_KEY_HEADER
ADMIN_KEY_ENV = "ERNIE_DEPLOY_ADMIN_KEY"
ADMIN_KEY_FILE_ENV = "ERNIE_DEPLOY_ADMIN_KEY_FILE"
# Triton's names for the API groups (`tritonserver --help`, 2.51): model-repository is index, load and
# unload; model-config is GET /v2/models/<m>/config (a model's full configuration, parameters included).
RESTRICTED_APIS = ("model-repository", "model-config")
# Triton reads the flag as `<apis>:<header>=<key>` (everything after that '=' is the key), and the key
# travels as an HTTP header and a gRPC metadata value: printable ASCII only, no ',' or whitespace. 16
# characters at least, so a placeholder like "changeme" is refused; `make_admin_key()` gives 43.
_KEY = re.compile(r"[A-Za-z0-9._~+/=:@-]{16,}")
GENERATE_HINT = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


@dataclass(frozen=True)
class AdminKey:
    value: str
    source: str  # where it came from, for messages (never the value itself)

    def headers(self, grpc: bool = False) -> dict[str, str]:
        """The header that carries the key: `headers=` of a tritonclient HTTP call, or with grpc=True a gRPC one."""
        return {GRPC_ADMIN_KEY_HEADER if grpc else ADMIN_KEY_HEADER: self.value}

    def __repr__(self) -> str:  # a key printed in a traceback or a log is a leaked key
        return f"AdminKey(<{len(self.value)} characters from {self.source}>)"


def check_admin_key(value: str, source: str) -> AdminKey:
    """`value` as an AdminKey, or an error naming `source` when it cannot be one."""
    if not value:
        raise BadOptionsError(f"the admin key from {source} is empty", f"put a key in it, e.g. from {GENERATE_HINT}")
    if not _KEY.fullmatch(value):
        raise BadOptionsError(
            f"the admin key from {source} is not usable: it needs 16 or more characters from "
            "A-Z a-z 0-9 . _ ~ + / = : @ - (no spaces or commas)",
            f"generate one with {GENERATE_HINT}",
        )
    return AdminKey(value, source)


def read_admin_key_file(path: str | os.PathLike) -> AdminKey:
    """The key in the file at `path`; the line end an editor or `echo` adds is not part of it (as in `$(cat path)`)."""
    source = f"the file {path}"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadOptionsError(
            f"admin key file {path} does not exist",
            "mount the secret there, or point --admin-key-file / ERNIE_DEPLOY_ADMIN_KEY_FILE at the key's file",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadOptionsError(
            f"cannot read the admin key file {path}: {exc}", "check its path and permissions"
        ) from None
    return check_admin_key(text.rstrip("\r\n"), source)


def admin_key_from(
    key_file: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None
) -> AdminKey | None:
    """The configured key: `key_file`, else the file named by ERNIE_DEPLOY_ADMIN_KEY_FILE, else the value of
    ERNIE_DEPLOY_ADMIN_KEY; None when none of them is set. A source that is set but empty is an error, not
    "no key": it is a secret that failed to arrive."""
    environ = os.environ if environ is None else environ
    if key_file:
        return read_admin_key_file(key_file)
    if environ.get(ADMIN_KEY_FILE_ENV):
        return read_admin_key_file(environ[ADMIN_KEY_FILE_ENV])
    if ADMIN_KEY_ENV in environ:
        return check_admin_key(environ[ADMIN_KEY_ENV], f"the environment variable {ADMIN_KEY_ENV}")
    return None


def make_admin_key() -> str:
    return secrets.token_urlsafe(32)  # 256 random bits


def write_new_admin_key(parent: str | os.PathLike | None = None) -> tuple[AdminKey, Path]:
    """A fresh random key in a new private folder (0700) as `admin-key` (0600); returns it and the file."""
    folder = Path(tempfile.mkdtemp(prefix="ernie-deploy-admin-", dir=parent))  # mkdtemp makes it 0700
    path = folder / "admin-key"
    value = make_admin_key()
    with atomic_path(path) as tmp:
        # Created 0600 before the key is written into it, in a folder only this user can enter.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(value + "\n")
    return AdminKey(value, f"the generated file {path}"), path
