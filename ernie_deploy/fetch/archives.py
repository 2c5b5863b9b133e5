"""Safe extraction: .tar (plain, gz, bz2, xz) and .zip archives into a folder, refusing members that would
escape it."""

from __future__ import annotations

import os
import posixpath
import re
import shutil
import stat
import tarfile
import zipfile
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError, DownloadError
from ernie_deploy.core.files import atomic_path

_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_ZIP_SUFFIXES = (".zip",)
ARCHIVE_SUFFIXES = _TAR_SUFFIXES + _ZIP_SUFFIXES
# tarfile's "data" extraction filter (Python 3.12, 3.11.4, 3.10.12): used where present. Our own
# checks run either way, so what is accepted or refused is the same on every supported Python.
_HAS_DATA_FILTER = hasattr(tarfile, "data_filter")


def is_archive(path: str | Path) -> bool:
    return str(path).lower().endswith(ARCHIVE_SUFFIXES)


def archive_format(path: str | Path) -> str:
    """ "tar" or "zip", by name and, failing that, by content; BadOptionsError for anything else."""
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
    raise BadOptionsError(
        f"{path} is not a supported archive",
        f"use one of {', '.join(ARCHIVE_SUFFIXES)}, or pass the unpacked folder",
    )


def safe_extract(archive: str | Path, dest: str | Path) -> Path:
    """Extract a tar (plain, gz, bz2, xz) or zip archive into `dest` and return `dest`.

    Every member is checked before anything is written: absolute paths, `..` escapes, symlinks
    that are absolute or lead outside, hardlinks to outside, device/fifo/socket members are refused
    with DownloadError naming the member. While extracting, each target is checked again against
    the real (symlink-resolved) paths on disk, and the finished tree once more, so chains of
    symlinks cannot lead out either. Extraction goes into a temporary folder next to `dest` that is
    renamed into place only on success (an existing `dest` is replaced).
    """
    archive, dest = Path(archive), Path(dest)
    if not archive.is_file():
        raise DownloadError(f"no such archive: {archive}", "check its path, or download it again")
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
        raise DownloadError(
            f"{archive} is not a readable {kind} archive: {exc}", "delete it and fetch it again"
        ) from None
    return dest


def _unsafe(archive: Path, member: str, why: str) -> DownloadError:
    return DownloadError(
        f"unsafe member {member!r} in {archive}: {why}; nothing was extracted",
        "only extract archives from sources you trust; this one would write outside its folder",
    )


def _member_path(archive: Path, name: str) -> str:
    """Normalized relative path of a member, or DownloadError if it is absolute or escapes."""
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
