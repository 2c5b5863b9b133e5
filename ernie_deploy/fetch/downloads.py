"""Verified downloads: HTTP(S) with resume (Range), retries with backoff, and sha256 checked before the file
lands at its final path.

Only the standard library and tqdm are used (no new dependencies).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from ernie_deploy import __version__
from ernie_deploy.core.errors import BadOptionsError, DownloadError


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: str | Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected.lower():
        raise DownloadError(
            f"sha256 mismatch for {path}: expected {expected}, got {got}",
            "the file is corrupt or not the pinned release; delete it and fetch again, or fix the pinned sha256",
        )


_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
# Seconds before retry n (n = 1, 2, ...) is BACKOFF_S * 2 ** (n - 1), capped; tests set it to 0.
BACKOFF_S = 1.0
BACKOFF_MAX_S = 30.0
_CHUNK = 1 << 16
# HTTP statuses worth another try: the server or something in front of it is busy or flaky.
_RETRY_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})


class _Retry(Exception):
    """A transfer problem that another attempt may not have (short body, busy server)."""


# Network failures that a retry may cure. HTTPError (a URLError) is handled before these are caught.
_RETRYABLE = (
    _Retry,
    urllib.error.URLError,
    http.client.HTTPException,
    ConnectionError,
    TimeoutError,
    socket.timeout,
    ssl.SSLError,
)


def normalize_sha256(sha256: str | None) -> str:
    """Return the digest lower-cased; BadOptionsError unless it is 64 hex digits."""
    value = (sha256 or "").strip().lower()
    if value.startswith("sha256:"):
        value = value[len("sha256:") :]
    if not _SHA256_RE.match(value):
        raise BadOptionsError(
            f"a sha256 of 64 hex digits is required, got {sha256!r}",
            "pin the download: pass the archive's sha256 (`sha256sum FILE` on a trusted copy)",
        )
    return value


def download(
    url: str,
    sha256: str,
    dest: str | Path,
    *,
    retries: int = 3,
    timeout: float = 60,
    progress: bool = True,
) -> Path:
    """Download `url` to `dest`, verified against `sha256`; returns `dest`.

    Bytes stream into `dest + ".part"`; an existing part file is resumed with a `Range` request (a
    server that ignores Range and answers 200 makes it start over). Connection errors, timeouts, short
    bodies and 408/429/5xx answers are retried `retries` times (so `retries + 1` attempts) with
    exponential backoff; the part file is kept between attempts, and after a final failure, so a
    later call resumes. The sha256 is checked before the rename into place: on a mismatch the part
    file is deleted and DownloadError names expected and got (if the bad file came from a resumed
    part, one fresh full download is tried first). If `dest` already holds the right bytes no
    request is made.
    """
    expected = normalize_sha256(sha256)
    _check_url(url)
    dest = Path(dest)
    if dest.is_file() and sha256_file(dest) == expected:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    attempts = max(0, int(retries)) + 1
    failures = 0
    fresh_retry_done = False
    while True:
        try:
            resumed = _transfer(url, part, timeout=timeout, progress=progress, label=dest.name)
        except _RETRYABLE as exc:
            failures += 1
            if failures >= attempts:
                raise DownloadError(
                    f"download of {url} failed after {attempts} attempt(s): {_describe(exc)}",
                    f"check the network or proxy (HTTPS_PROXY) and run again; the partial file {part} "
                    "is kept and the download resumes from it",
                ) from None
            time.sleep(min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (failures - 1)))
            continue
        got = sha256_file(part)
        if got == expected:
            os.replace(part, dest)
            return dest
        part.unlink(missing_ok=True)
        if resumed and not fresh_retry_done:
            # The stale part file may have come from another file or a broken run: start over once.
            fresh_retry_done = True
            continue
        raise DownloadError(
            f"sha256 mismatch for {url}: expected {expected}, got {got}",
            "the server sent other bytes than the pinned release; check the URL, or fix the pinned sha256 "
            "if the release was replaced on purpose",
        )


def _check_url(url: str) -> None:
    scheme = urlparse(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise BadOptionsError(f"only http(s) URLs can be downloaded, got {url!r}", "pass an http:// or https:// URL")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return f"{type(exc).__name__}: {exc.reason}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _transfer(url: str, part: Path, *, timeout: float, progress: bool, label: str) -> bool:
    """One attempt: append to (or restart) the part file. Returns whether it holds resumed bytes.

    Raises a `_RETRYABLE` error for a transfer another attempt may finish, DownloadError for one it
    cannot (404, 403, ...).
    """
    offset = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": f"ernie-deploy/{__version__}", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 416 and offset:
            # Nothing left past `offset`: the part file may already be whole; the caller checks it.
            return True
        if exc.code in _RETRY_STATUSES:
            raise _Retry(f"HTTP {exc.code} {exc.reason}") from None
        raise DownloadError(
            f"download of {url} failed: HTTP {exc.code} {exc.reason}",
            "check that the URL is right and publicly readable",
        ) from None
    with response:
        status = response.status
        length = _int_header(response.headers.get("Content-Length"))
        if status == 206 and offset:
            start, total = _content_range(response.headers.get("Content-Range"))
            if start != offset:
                # Not the range asked for: drop the part file so the next attempt starts clean.
                part.unlink(missing_ok=True)
                raise _Retry(f"server answered bytes from {start} to a request from {offset}")
            mode = "ab"
        elif status == 200:
            offset, total, mode = 0, length, "wb"  # Range ignored (or not sent): start over
        else:
            raise DownloadError(
                f"download of {url} failed: unexpected HTTP status {status}",
                "check that the URL serves the file itself (not a page about it), then retry",
            )
        received = 0
        from tqdm import tqdm

        with (
            open(part, mode) as fh,
            tqdm(
                total=total,
                initial=offset,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                desc=label,
                disable=not progress,
            ) as bar,
        ):
            while True:
                block = response.read(_CHUNK)
                if not block:
                    break
                fh.write(block)
                received += len(block)
                bar.update(len(block))
        if length is not None and received < length:
            raise _Retry(f"connection closed after {received} of {length} bytes")
    return offset > 0


def _int_header(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _content_range(value: str | None) -> tuple[int | None, int | None]:
    """`bytes START-END/TOTAL` -> (START, TOTAL or None); (None, None) when unparsable."""
    match = re.match(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", value or "")
    if not match:
        return None, None
    return int(match.group(1)), (int(match.group(3)) if match.group(3) != "*" else None)
