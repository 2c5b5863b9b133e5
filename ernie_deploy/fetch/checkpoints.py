"""Obtain checkpoints: a URL pinned by sha256, a local directory, or the offline bootstrap.

- `download`: HTTP(S) with resume (Range), retries with backoff, and sha256 checked before the file
  lands at its final path.
- `safe_extract`: .tar/.tar.gz/.tgz/.zip into a folder, refusing members that would escape it.
- `inspect_checkpoint`: tell a PaddleNLP dygraph checkpoint from a Paddle static inference model.
- `resolve_checkpoint`: a URL, a local archive or a local folder -> `Checkpoint`.

Only the standard library and tqdm are used (no new dependencies). The `--bootstrap` source (training
a small model offline) is handled elsewhere.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import posixpath
import re
import shutil
import socket
import ssl
import stat
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from ernie_deploy import __version__
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.layout import cache_dir


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_sha256(path: str | Path, expected: str) -> None:
    got = sha256_file(path)
    if got != expected.lower():
        raise ErnieDeployError(
            f"sha256 mismatch for {path}: expected {expected}, got {got}",
            "the file is corrupt or not the pinned release; delete it and fetch again, or fix the pinned sha256",
        )


# --------------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------------

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
    """Return the digest lower-cased; ErnieDeployError unless it is 64 hex digits."""
    value = (sha256 or "").strip().lower()
    if value.startswith("sha256:"):
        value = value[len("sha256:") :]
    if not _SHA256_RE.match(value):
        raise ErnieDeployError(
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
    file is deleted and ErnieDeployError names expected and got (if the bad file came from a resumed
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
                raise ErnieDeployError(
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
        raise ErnieDeployError(
            f"sha256 mismatch for {url}: expected {expected}, got {got}",
            "the server sent other bytes than the pinned release; check the URL, or fix the pinned sha256 "
            "if the release was replaced on purpose",
        )


def _check_url(url: str) -> None:
    scheme = urlparse(url).scheme.lower()
    if scheme not in ("http", "https"):
        raise ErnieDeployError(f"only http(s) URLs can be downloaded, got {url!r}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        return f"{type(exc).__name__}: {exc.reason}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _transfer(url: str, part: Path, *, timeout: float, progress: bool, label: str) -> bool:
    """One attempt: append to (or restart) the part file. Returns whether it holds resumed bytes.

    Raises a `_RETRYABLE` error for a transfer another attempt may finish, ErnieDeployError for one it
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
        raise ErnieDeployError(
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
            raise ErnieDeployError(f"download of {url} failed: unexpected HTTP status {status}")
        received = 0
        from tqdm import tqdm

        with open(part, mode) as fh, tqdm(
            total=total,
            initial=offset,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            desc=label,
            disable=not progress,
        ) as bar:
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


# --------------------------------------------------------------------------------------------------
# safe_extract
# --------------------------------------------------------------------------------------------------

_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_ZIP_SUFFIXES = (".zip",)
ARCHIVE_SUFFIXES = _TAR_SUFFIXES + _ZIP_SUFFIXES
# tarfile's "data" extraction filter (Python 3.12, 3.11.4, 3.10.12): used where present. Our own
# checks run either way, so what is accepted or refused is the same on every supported Python.
_HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def is_archive(path: str | Path) -> bool:
    return str(path).lower().endswith(ARCHIVE_SUFFIXES)


def archive_format(path: str | Path) -> str:
    """"tar" or "zip", by name and, failing that, by content; ErnieDeployError for anything else."""
    path = Path(path)
    name = path.name.lower()
    if name.endswith(_ZIP_SUFFIXES):
        return "zip"
    if name.endswith(_TAR_SUFFIXES):
        return "tar"
    if path.is_file():
        if tarfile.is_tarfile(path):
            return "tar"
        if zipfile.is_zipfile(path):
            return "zip"
    raise ErnieDeployError(
        f"{path} is not a supported archive",
        f"use one of {', '.join(ARCHIVE_SUFFIXES)}, or pass the unpacked folder",
    )


def safe_extract(archive: str | Path, dest: str | Path) -> Path:
    """Extract a tar (plain, gz, bz2, xz) or zip archive into `dest` and return `dest`.

    Every member is checked before anything is written: absolute paths, `..` escapes, symlinks
    that are absolute or lead outside, hardlinks to outside, device/fifo/socket members are refused
    with ErnieDeployError naming the member. While extracting, each target is checked again against
    the real (symlink-resolved) paths on disk, and the finished tree once more, so chains of
    symlinks cannot lead out either. Extraction goes into a temporary folder next to `dest` that is
    renamed into place only on success (an existing `dest` is replaced).
    """
    archive, dest = Path(archive), Path(dest)
    if not archive.is_file():
        raise ErnieDeployError(f"no such archive: {archive}")
    kind = archive_format(archive)
    try:
        with atomic_path(dest) as tmp:
            tmp.mkdir()
            if kind == "zip":
                _extract_zip(archive, tmp)
            else:
                _extract_tar(archive, tmp)
            _check_tree(archive, tmp)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        raise ErnieDeployError(
            f"{archive} is not a readable {kind} archive: {exc}", "delete it and fetch it again"
        ) from None
    return dest


def _unsafe(archive: Path, member: str, why: str) -> ErnieDeployError:
    return ErnieDeployError(
        f"unsafe member {member!r} in {archive}: {why}; nothing was extracted",
        "only extract archives from sources you trust; this one would write outside its folder",
    )


def _member_path(archive: Path, name: str) -> str:
    """Normalized relative path of a member, or ErnieDeployError if it is absolute or escapes."""
    if not name or "\x00" in name:
        raise _unsafe(archive, name, "empty name or NUL byte in name")
    unified = name.replace("\\", "/")
    if unified.startswith("/") or re.match(r"^[A-Za-z]:", unified):
        raise _unsafe(archive, name, "absolute path")
    normal = posixpath.normpath(unified)
    if normal == ".." or normal.startswith("../"):
        raise _unsafe(archive, name, "path escapes the destination with '..'")
    return normal


def _check_link_target(archive: Path, name: str, link: str, *, hard: bool) -> None:
    """Textual check of a link target (symlinks: relative to the member's folder; hardlinks: to the root)."""
    kind = "hardlink" if hard else "symlink"
    unified = (link or "").replace("\\", "/")
    if not unified or "\x00" in unified:
        raise _unsafe(archive, name, f"{kind} with an empty target")
    if unified.startswith("/") or re.match(r"^[A-Za-z]:", unified):
        raise _unsafe(archive, name, f"{kind} to absolute path {link!r}")
    base = "" if hard else posixpath.dirname(posixpath.normpath(name.replace("\\", "/")))
    normal = posixpath.normpath(posixpath.join(base, unified))
    if normal == ".." or normal.startswith("../"):
        raise _unsafe(archive, name, f"{kind} to {link!r} points outside the destination")


def _inside(root_real: str, path: str) -> bool:
    real = os.path.realpath(path)
    return real == root_real or real.startswith(root_real + os.sep)


def _check_on_disk(archive: Path, root: Path, name: str, link: str | None = None, *, hard: bool = False) -> None:
    """Check, against what is on disk now (symlinks resolved), that a member and its link stay inside."""
    root_real = os.path.realpath(root)
    target = root / name
    if not _inside(root_real, str(target)):
        raise _unsafe(archive, name, "its path leads outside the destination through a symlink")
    if link is not None:
        base = root if hard else target.parent
        if not _inside(root_real, str(base / link)):
            kind = "hardlink" if hard else "symlink"
            raise _unsafe(archive, name, f"{kind} to {link!r} resolves outside the destination")


def _check_tree(archive: Path, root: Path) -> None:
    """Last line: no symlink in the finished tree may resolve outside it."""
    root_real = os.path.realpath(root)
    for folder, dirs, files in os.walk(root):
        for entry in dirs + files:
            path = os.path.join(folder, entry)
            if os.path.islink(path) and not _inside(root_real, path):
                rel = os.path.relpath(path, root)
                raise _unsafe(archive, rel, f"symlink to {os.readlink(path)!r} resolves outside the destination")


def _extract_tar(archive: Path, tmp: Path) -> None:
    with tarfile.open(archive, "r:*") as tf:
        tf.errorlevel = 2  # raise on every error instead of logging it
        members = tf.getmembers()
        for member in members:  # refuse before writing anything
            _check_tar_member(archive, member)
        for member in members:
            name = _member_path(archive, member.name)
            if name == ".":
                continue
            link = member.linkname if (member.issym() or member.islnk()) else None
            _check_on_disk(archive, tmp, name, link, hard=member.islnk())
            if _HAS_DATA_FILTER:
                try:
                    tf.extract(member, tmp, filter="data")
                except tarfile.FilterError as exc:  # our checks should have caught it first
                    raise _unsafe(archive, member.name, str(exc)) from None
            else:  # Pythons without tarfile.data_filter (tests force this path too)
                _extract_tar_member(archive, tf, member, name, tmp)


def _check_tar_member(archive: Path, member: tarfile.TarInfo) -> None:
    name = _member_path(archive, member.name)
    if member.issym():
        _check_link_target(archive, member.name, member.linkname, hard=False)
    elif member.islnk():
        _check_link_target(archive, member.name, member.linkname, hard=True)
        if posixpath.normpath(member.linkname.replace("\\", "/")) == name:
            raise _unsafe(archive, member.name, "hardlink to itself")
    elif member.ischr() or member.isblk():
        raise _unsafe(archive, member.name, "device file")
    elif member.isfifo():
        raise _unsafe(archive, member.name, "fifo")
    elif not (member.isfile() or member.isdir()):
        raise _unsafe(archive, member.name, f"unsupported member type {member.type!r}")


def _file_mode(mode: int) -> int:
    """What tarfile's data filter keeps of a regular file's mode: no high bits, no group/other write."""
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


def _extract_tar_member(archive: Path, tf: tarfile.TarFile, member: tarfile.TarInfo, name: str, tmp: Path) -> None:
    """Extraction without tarfile's filter, matching what the data filter would produce."""
    target = tmp / name
    if member.isdir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(target) and not target.is_dir():
        target.unlink()
    if member.issym():
        os.symlink(member.linkname, target)
    elif member.islnk():
        source = tmp / posixpath.normpath(member.linkname.replace("\\", "/"))
        if not source.is_file():
            raise _unsafe(archive, member.name, f"hardlink to {member.linkname!r}, which is not an extracted file")
        shutil.copy2(source, target)
    else:
        fh = tf.extractfile(member)
        with fh, open(target, "wb") as out:
            shutil.copyfileobj(fh, out)
        os.chmod(target, _file_mode(member.mode))
        os.utime(target, (member.mtime, member.mtime))


def _zip_kind(info: zipfile.ZipInfo) -> int:
    """The file type from the Unix mode in external_attr (0 when the zip carries none)."""
    return stat.S_IFMT(info.external_attr >> 16)


def _extract_zip(archive: Path, tmp: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        links: dict[str, str] = {}
        for info in infos:  # refuse before writing anything
            _member_path(archive, info.filename)
            kind = _zip_kind(info)
            if kind == stat.S_IFLNK:
                link = zf.read(info).decode("utf-8", "surrogateescape")
                _check_link_target(archive, info.filename, link, hard=False)
                links[info.filename] = link
            elif kind in (stat.S_IFCHR, stat.S_IFBLK):
                raise _unsafe(archive, info.filename, "device file")
            elif kind in (stat.S_IFIFO, stat.S_IFSOCK):
                raise _unsafe(archive, info.filename, "fifo or socket")
        for info in infos:
            name = _member_path(archive, info.filename)
            if name == ".":
                continue
            link = links.get(info.filename)
            _check_on_disk(archive, tmp, name, link)
            target = tmp / name
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            if os.path.lexists(target) and not target.is_dir():
                target.unlink()
            if link is not None:
                os.symlink(link, target)
                continue
            with zf.open(info) as fh, open(target, "wb") as out:
                shutil.copyfileobj(fh, out)
            mode = (info.external_attr >> 16) & 0o7777
            if mode:
                os.chmod(target, _file_mode(mode))


# --------------------------------------------------------------------------------------------------
# checkpoint layouts
# --------------------------------------------------------------------------------------------------

DYGRAPH_CONFIGS = ("model_config.json", "config.json")
DYGRAPH_PARAMS = "model_state.pdparams"
VOCAB = "vocab.txt"
STATIC_PREFIXES = ("inference", "model")  # preferred, in order, when a folder holds several
_EXPECTED = (
    "expected either a PaddleNLP dygraph checkpoint (model_config.json or config.json, "
    "model_state.pdparams, vocab.txt) or a Paddle static inference model (PREFIX.json + PREFIX.pdiparams "
    "from Paddle 3, or PREFIX.pdmodel + PREFIX.pdiparams, usually with PREFIX inference or model; "
    "vocab.txt in the same folder or its parent)"
)


@dataclass(frozen=True)
class Checkpoint:
    """A model to deploy, as found on disk."""

    kind: str  # "dygraph" (PaddleNLP save_pretrained) or "static" (Paddle inference model)
    root: Path  # the folder holding the weights
    params_file: Path  # model_state.pdparams | PREFIX.pdiparams
    vocab_file: Path
    config_file: Path | None = None  # model_config.json / config.json (static: if one lies beside it)
    model_file: Path | None = None  # static only: PREFIX.json (PIR) or PREFIX.pdmodel (legacy)

    @property
    def static_format(self) -> str | None:
        """"pir" (PREFIX.json) or "legacy" (PREFIX.pdmodel); None for dygraph checkpoints."""
        if self.model_file is None:
            return None
        return "pir" if self.model_file.suffix == ".json" else "legacy"

    @property
    def prefix(self) -> Path | None:
        """Static models: the path prefix Paddle loads (root/inference); None for dygraph."""
        return self.model_file.with_suffix("") if self.model_file is not None else None

    def describe(self) -> str:
        files = [self.model_file, self.params_file, self.config_file, self.vocab_file]
        names = ", ".join(str(f.relative_to(self.root)) if f.parent == self.root else str(f) for f in files if f)
        kind = f"static ({self.static_format})" if self.kind == "static" else "dygraph"
        return f"{kind} checkpoint at {self.root}: {names}"


def inspect_checkpoint(path: str | Path) -> Checkpoint:
    """Detect the checkpoint layout at `path` (a folder).

    When the folder itself holds no layout, a single subfolder is looked into: always when it is the
    only entry (an archive's top-level folder), and also when it sits beside loose files (a static
    `export/` beside the tokenizer's vocab.txt).

    A folder with a complete dygraph layout wins over a static model in the same folder (the
    dygraph weights are the source the static model is exported from). ErnieDeployError lists what
    was found and what is expected when no layout matches, and names the missing file when a layout
    is incomplete (e.g. a static model without vocab.txt).
    """
    path = Path(path)
    if not path.exists():
        raise ErnieDeployError(f"no such checkpoint: {path}", _EXPECTED)
    if not path.is_dir():
        raise ErnieDeployError(
            f"{path} is a file, not a checkpoint folder",
            "pass the folder; archives are unpacked by resolve_checkpoint (or the CLI's --checkpoint)",
        )
    return _inspect_folder(path, path)


def _inspect_folder(root: Path, top: Path) -> Checkpoint:
    found = _detect(root)
    if found is not None:
        return found
    entries = _visible(root)
    subdirs = [e for e in entries if e.is_dir()]
    inner = ""
    if len(subdirs) == 1:
        if len(entries) == 1:
            # An archive's single top-level folder (or a chain of them): look inside.
            return _inspect_folder(subdirs[0], top)
        # One folder beside loose files (e.g. vocab.txt beside export/): try it, else report here.
        try:
            return _inspect_folder(subdirs[0], top)
        except ErnieDeployError as exc:
            inner = f"; in {subdirs[0].name}/: {exc.problem}"
    listing = ", ".join(e.name + ("/" if e.is_dir() else "") for e in entries[:30]) or "nothing"
    if len(entries) > 30:
        listing += f", ... ({len(entries)} entries)"
    where = str(root) if root == top else f"{root} (inside {top})"
    fix = _EXPECTED
    names = [e.name for e in entries]
    if any(n.endswith(".safetensors") or re.match(r"model_state-.*\.pdparams$", n) for n in names):
        fix += "; safetensors or sharded weights are not supported: re-save with save_pretrained(..., safe_serialization=False) into a single model_state.pdparams"
    raise ErnieDeployError(f"no checkpoint layout recognized in {where}; found: {listing}{inner}", fix)


def _visible(folder: Path) -> list[Path]:
    """Entries that matter: no dotfiles, no __MACOSX resource forks."""
    return sorted(e for e in folder.iterdir() if not e.name.startswith(".") and e.name != "__MACOSX")


def _first(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.is_file()), None)


def _detect(root: Path) -> Checkpoint | None:
    dygraph = _detect_dygraph(root)
    if dygraph is not None:
        return dygraph
    return _detect_static(root)


def _detect_dygraph(root: Path) -> Checkpoint | None:
    params = root / DYGRAPH_PARAMS
    if not params.is_file():
        return None
    config = _first(*(root / name for name in DYGRAPH_CONFIGS))
    vocab = _first(root / VOCAB)
    missing = [label for label, got in (("model_config.json or config.json", config), (VOCAB, vocab)) if not got]
    if missing:
        raise ErnieDeployError(
            f"{root} has {DYGRAPH_PARAMS} but lacks {' and '.join(missing)}",
            "a PaddleNLP dygraph checkpoint needs model_config.json (or config.json), model_state.pdparams "
            "and vocab.txt in one folder (save both model and tokenizer with save_pretrained)",
        )
    return Checkpoint("dygraph", root, params_file=params, vocab_file=vocab, config_file=config)


def _detect_static(root: Path) -> Checkpoint | None:
    pairs: dict[str, Path] = {}
    for params in sorted(root.glob("*.pdiparams")):
        stem = params.name[: -len(".pdiparams")]
        model = _first(root / f"{stem}.json", root / f"{stem}.pdmodel")  # Paddle 3 PIR first
        if model is not None and params.is_file():
            pairs[stem] = model
    if not pairs:
        return None
    stem = next((p for p in STATIC_PREFIXES if p in pairs), None)
    if stem is None:
        if len(pairs) > 1:
            raise ErnieDeployError(
                f"{root} holds several static models ({', '.join(sorted(pairs))}); which one is meant is unclear",
                f"keep one, or name it with the prefix {' or '.join(STATIC_PREFIXES)}",
            )
        stem = next(iter(pairs))
    model = pairs[stem]
    vocab = _first(root / VOCAB, root.parent / VOCAB)
    if vocab is None:
        raise ErnieDeployError(
            f"static model {model.name} + {stem}.pdiparams found in {root}, but no {VOCAB} in it or in {root.parent}",
            f"place the tokenizer's {VOCAB} next to the model files (or in the folder above)",
        )
    config = _first(*(d / name for d in (root, root.parent) for name in ("config.json", "model_config.json")))
    return Checkpoint(
        "static", root, params_file=root / f"{stem}.pdiparams", vocab_file=vocab, config_file=config, model_file=model
    )


# --------------------------------------------------------------------------------------------------
# resolve
# --------------------------------------------------------------------------------------------------


def resolve_checkpoint(source: str, *, sha256: str | None = None, workdir: str | Path) -> Checkpoint:
    """Turn a checkpoint source into a `Checkpoint`.

    - http(s) URL of an archive: `sha256` is required; it is downloaded to
      `cache_dir()/downloads/<sha256>/<name>` and unpacked to `cache_dir()/extracted/<sha256>`, both
      reused on later calls.
    - local archive: checked against `sha256` when given, unpacked to `workdir/extracted/<its sha256>`
      (reused while the archive is unchanged).
    - local folder: inspected in place (`sha256` cannot apply to a folder and is refused).
    """
    source = str(source)
    parsed = urlparse(source)
    if parsed.scheme.lower() in ("http", "https"):
        if not sha256:
            raise ErnieDeployError(
                f"the checkpoint URL {source} has no pinned sha256",
                "pass its sha256 (--sha256 HEX; `sha256sum FILE` on a trusted copy): downloads are always verified",
            )
        digest = normalize_sha256(sha256)
        archive = download(source, digest, cache_dir() / "downloads" / digest / _url_filename(parsed.path))
        return _inspect_archive(archive, cache_dir() / "extracted" / digest)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", source):
        raise ErnieDeployError(
            f"unsupported checkpoint source {source!r}", "use an http(s) URL, a local folder or a local archive"
        )
    path = Path(source).expanduser()
    if path.is_dir():
        if sha256:
            raise ErnieDeployError(
                f"a sha256 was given for the folder {path}; only URLs and archives can be verified",
                "drop --sha256, or point at the archive instead of the unpacked folder",
            )
        return inspect_checkpoint(path)
    if path.is_file():
        archive_format(path)  # refuse non-archives with a clear message before hashing
        digest = sha256_file(path)
        if sha256 and digest != normalize_sha256(sha256):
            raise ErnieDeployError(
                f"sha256 mismatch for {path}: expected {normalize_sha256(sha256)}, got {digest}",
                "the archive is not the pinned release; fetch it again or fix the pinned sha256",
            )
        return _inspect_archive(path, Path(workdir) / "extracted" / digest)
    raise ErnieDeployError(
        f"no such checkpoint: {source}",
        "pass an http(s) URL with --sha256, a local checkpoint folder, or a .tar.gz/.tgz/.tar/.zip archive",
    )


def _url_filename(url_path: str) -> str:
    """A safe local file name from a URL path (`.../ernie-3.0-mini.tar.gz` -> `ernie-3.0-mini.tar.gz`)."""
    name = unquote(posixpath.basename(url_path.rstrip("/")))
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip(".")
    return name or "download"


def _inspect_archive(archive: Path, out: Path) -> Checkpoint:
    # safe_extract renames into place only when complete, so an existing folder is a whole one.
    if not out.is_dir():
        safe_extract(archive, out)
    return inspect_checkpoint(out)
