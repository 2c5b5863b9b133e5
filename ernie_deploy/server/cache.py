"""Triton's response cache, the server's side: the local cache every deployment starts with, where the pip wheel
keeps the cache's library, and the refusal of a repository whose models ask for a cache the server does not have.

A model asks for the cache in its config (`build --cache` writes `response_cache { enable: true }` on the model users
call); the server holds one cache for all of them (`--cache-config local,size=N`). It is on by default, small, for
every deployment, because the image's and the Kubernetes command line is fixed before the repository is known, and a
model loaded later through the repository API may ask for it. Measured on the pip server (Triton 2.51): tritonserver's
resident memory was 39,048 KiB without a cache, 39,456 KiB with 64 MiB and 39,820 KiB with 1 GiB, so the size is a
bound on what cached answers may take, not memory taken up front; a model that does not ask is never looked up.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, InstallError
from ernie_deploy.server.binary import TritonBinary

# 64 MiB: one answer of the demo classifier took 288 bytes of the local cache (8 answers used 0.22% of 1 MiB), so
# about 230,000 answers; past the size, the least recently used are evicted.
DEFAULT_CACHE_BYTES = 64 * 2**20
# The folder of Triton's cache libraries (`<dir>/local/libtritoncache_local.so`) that a system tritonserver looks in
# by default; the pip wheel ships its own beside its binary, and without --cache-directory the wheel's server exits
# at start ("unable to find 'libtritoncache_local.so' for cache. Searched: /opt/tritonserver/caches").
SYSTEM_CACHES = Path("/opt/tritonserver/caches")
LOCAL_CACHE_LIBRARY = Path("local") / "libtritoncache_local.so"
# A config's `response_cache { enable: true }` as protobuf text format writes it.
_ASKS = re.compile(r"^response_cache\s*\{\s*enable:\s*true\s*\}", re.MULTILINE)


def cache_config_args(cache_bytes: int) -> list[str]:
    """The flag that gives the server a local response cache of `cache_bytes` (none for 0)."""
    if cache_bytes < 0:
        raise BadOptionsError(f"--cache-size {cache_bytes} is negative", "pass a size in bytes, or 0 for no cache")
    return [f"--cache-config=local,size={cache_bytes}"] if cache_bytes else []


def cache_directory_args(binary: TritonBinary, cache_bytes: int) -> list[str]:
    """What the launcher adds for the cache: --cache-directory where the server's cache libraries are not where
    Triton looks by default (the pip wheel's are beside its binary). `check_cache` refuses a server that has none."""
    caches = caches_folder(binary) if cache_bytes else None
    return [f"--cache-directory={caches}"] if caches not in (None, SYSTEM_CACHES) else []


def _candidates(binary: TritonBinary) -> list[Path]:
    beside = [binary.wheel_root / "caches", binary.path.resolve().parent.parent / "caches"]
    return [*dict.fromkeys(beside), SYSTEM_CACHES]


def caches_folder(binary: TritonBinary) -> Path | None:
    """Where the server's cache libraries are: `caches/` beside the binary's `bin/` (the wheel's), else Triton's
    default; None where the local cache's library is in neither."""
    return next((f for f in _candidates(binary) if (f / LOCAL_CACHE_LIBRARY).is_file()), None)


def models_asking_for_cache(repository: str | os.PathLike) -> list[str]:
    """The models of `repository` whose config enables the response cache."""
    found = []
    for config in sorted(Path(repository).glob("*/config.pbtxt")):
        try:
            text = config.read_text(encoding="utf-8")
        except OSError:
            continue
        if _ASKS.search(text):
            found.append(config.parent.name)
    return found


def check_cache(repository: str | os.PathLike, cache_bytes: int, binary: TritonBinary) -> None:
    """Refuse what Triton would fail on or silently not do: a cache whose library the server does not have (it exits
    at start), and models that ask for the cache on a server started without one (Triton loads them and answers every
    request uncached, without a word: measured 0 hits and 0 misses, nothing in the log)."""
    if cache_bytes and caches_folder(binary) is None:
        raise InstallError(
            f"no local response cache library ({LOCAL_CACHE_LIBRARY}) for {binary.path}: looked in "
            f"{', '.join(map(str, _candidates(binary)))}, and tritonserver would exit at start",
            "reinstall nvidia-pytriton (it ships caches/local), run NVIDIA's tritonserver container, or start the "
            "server with --cache-size 0 (no model of the repository may then be built with --cache)",
        )
    asking = models_asking_for_cache(repository) if not cache_bytes else []
    if asking:
        raise BadOptionsError(
            f"{', '.join(asking)} in {repository} asks for Triton's response cache, and this server is started "
            "without one (--cache-size 0): it would answer every request uncached",
            "start it with a cache (leave --cache-size out for the default, or pass a size in bytes), or rebuild "
            "the model without --cache",
        )
