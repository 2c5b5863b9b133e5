"""fetch: download (resume, retry, sha256), safe_extract, checkpoint layouts. Offline: a local HTTP server."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import stat
import tarfile
import threading
import time
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.fetch import archives, downloads
from ernie_deploy.fetch.archives import safe_extract
from ernie_deploy.fetch.checkpoints import Checkpoint, inspect_checkpoint, resolve_checkpoint
from ernie_deploy.fetch.downloads import download

PAYLOAD = os.urandom(300_000) + b"end"
PAYLOAD_SHA = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setattr(downloads, "BACKOFF_S", 0.0)


# --------------------------------------------------------------------------------------------------
# a local HTTP server
# --------------------------------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    """Serves server.files. server.behaviour picks how:

    range        honours `Range: bytes=N-` (206, or 416 past the end)
    ignore-range always answers 200 with the whole file
    drop-once    the first request gets the full Content-Length but half the body, then the
                 connection closes; later requests honour Range
    stall-once   the first request stalls mid-body (longer than the client's timeout)
    503-once     the first request gets 503
    """

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        srv = self.server
        with srv.lock:
            srv.requests.append((self.path, self.headers.get("Range")))
            first = len(srv.requests) == 1
        body = srv.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        behaviour = srv.behaviour
        if first and behaviour == "503-once":
            self.send_error(503)
            return
        if first and behaviour in ("drop-once", "stall-once"):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            if behaviour == "stall-once":
                time.sleep(1.5)
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        ranged = self.headers.get("Range")
        if ranged and behaviour != "ignore-range":
            start = int(ranged.removeprefix("bytes=").split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(body)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            self.send_header("Content-Length", str(len(body) - start))
            self.end_headers()
            self.wfile.write(body[start:])
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):  # dropped connections are the point of some tests
        pass


@pytest.fixture
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.files = {"/model.bin": PAYLOAD}
    srv.behaviour = "range"
    srv.requests = []
    srv.lock = threading.Lock()
    srv.url = lambda path="/model.bin": f"http://127.0.0.1:{srv.server_address[1]}{path}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


# --------------------------------------------------------------------------------------------------
# download
# --------------------------------------------------------------------------------------------------


def test_download_good_file_is_verified_and_placed(server, tmp_path, capsys):
    dest = tmp_path / "dl" / "model.bin"
    assert download(server.url(), PAYLOAD_SHA, dest, progress=True) == dest
    assert dest.read_bytes() == PAYLOAD
    assert not dest.with_name("model.bin.part").exists()
    assert server.requests == [("/model.bin", None)]
    assert "model.bin" in capsys.readouterr().err  # the tqdm bar


def test_download_skips_network_when_dest_is_already_right(server, tmp_path):
    dest = tmp_path / "model.bin"
    dest.write_bytes(PAYLOAD)
    download(server.url(), PAYLOAD_SHA.upper(), dest, progress=False)
    assert server.requests == []


def test_download_replaces_a_wrong_existing_dest(server, tmp_path):
    dest = tmp_path / "model.bin"
    dest.write_bytes(b"stale")
    download(server.url(), PAYLOAD_SHA, dest, progress=False)
    assert dest.read_bytes() == PAYLOAD


def test_download_sha256_mismatch_leaves_nothing(server, tmp_path):
    dest = tmp_path / "dl" / "model.bin"
    wrong = "0" * 64
    with pytest.raises(ErnieDeployError) as err:
        download(server.url(), wrong, dest, progress=False)
    message = str(err.value)
    assert wrong in message and PAYLOAD_SHA in message
    assert list((tmp_path / "dl").iterdir()) == []


@pytest.mark.parametrize("bad", ["", None, "abc", "g" * 64, "0" * 63])
def test_download_requires_a_wellformed_sha256(server, tmp_path, bad):
    with pytest.raises(ErnieDeployError, match="sha256"):
        download(server.url(), bad, tmp_path / "x", progress=False)
    assert server.requests == []


def test_download_refuses_other_schemes(tmp_path):
    with pytest.raises(ErnieDeployError, match="http"):
        download("ftp://example.com/x.tar.gz", PAYLOAD_SHA, tmp_path / "x", progress=False)


def test_download_resumes_after_a_dropped_connection(server, tmp_path):
    server.behaviour = "drop-once"
    dest = tmp_path / "model.bin"
    download(server.url(), PAYLOAD_SHA, dest, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 2
    assert server.requests[1][1] == f"bytes={len(PAYLOAD) // 2}-"  # resumed, not restarted


def test_download_retries_after_a_timeout(server, tmp_path):
    server.behaviour = "stall-once"
    dest = tmp_path / "model.bin"
    download(server.url(), PAYLOAD_SHA, dest, timeout=0.3, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert len(server.requests) == 2


def test_download_retries_a_503(server, tmp_path):
    server.behaviour = "503-once"
    download(server.url(), PAYLOAD_SHA, tmp_path / "model.bin", progress=False)
    assert len(server.requests) == 2


def test_download_resumes_a_part_file_left_by_an_earlier_run(server, tmp_path):
    dest = tmp_path / "model.bin"
    dest.with_name("model.bin.part").write_bytes(PAYLOAD[:1000])
    download(server.url(), PAYLOAD_SHA, dest, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/model.bin", "bytes=1000-")]


def test_download_restarts_when_the_server_ignores_range(server, tmp_path):
    server.behaviour = "ignore-range"
    dest = tmp_path / "model.bin"
    dest.with_name("model.bin.part").write_bytes(PAYLOAD[:1000])
    download(server.url(), PAYLOAD_SHA, dest, progress=False)
    assert dest.read_bytes() == PAYLOAD  # not 1000 bytes twice
    assert server.requests == [("/model.bin", "bytes=1000-")]


def test_download_complete_part_file_gets_416_and_is_used(server, tmp_path):
    dest = tmp_path / "model.bin"
    dest.with_name("model.bin.part").write_bytes(PAYLOAD)
    download(server.url(), PAYLOAD_SHA, dest, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/model.bin", f"bytes={len(PAYLOAD)}-")]


def test_download_corrupt_part_file_falls_back_to_a_fresh_download(server, tmp_path):
    dest = tmp_path / "model.bin"
    dest.with_name("model.bin.part").write_bytes(b"x" * 1000)  # not a prefix of the payload
    download(server.url(), PAYLOAD_SHA, dest, progress=False)
    assert dest.read_bytes() == PAYLOAD
    assert server.requests == [("/model.bin", "bytes=1000-"), ("/model.bin", None)]


def test_download_404_is_not_retried(server, tmp_path):
    with pytest.raises(ErnieDeployError, match="404"):
        download(server.url("/missing.bin"), PAYLOAD_SHA, tmp_path / "m", progress=False)
    assert len(server.requests) == 1


def test_download_gives_up_after_retries_and_keeps_the_part_file(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ErnieDeployError, match="after 3 attempt"):
        download(f"http://127.0.0.1:{port}/m.bin", PAYLOAD_SHA, tmp_path / "m.bin", retries=2, progress=False)


# --------------------------------------------------------------------------------------------------
# safe_extract
# --------------------------------------------------------------------------------------------------


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                tf.addfile(info)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o644
    return info


def _unsafe_tars(outside: Path) -> dict[str, tuple[str, list]]:
    """Case -> (the member the error must name, the archive's members in order)."""
    sym, hard = tarfile.SYMTYPE, tarfile.LNKTYPE
    absolute = str(outside / "abs_evil")
    return {
        "dotdot": ("../evil", [(_info("ok.txt"), b"ok"), (_info("../evil"), b"evil")]),
        "nested-dotdot": ("a/../../evil", [(_info("a/../../evil"), b"evil")]),
        "absolute": (absolute, [(_info(absolute), b"evil")]),
        "symlink-etc-passwd": ("passwd", [(_info("passwd", sym, "/etc/passwd"), None)]),
        "symlink-relative-escape": ("a/up", [(_info("a/up", sym, "../../.."), None)]),
        "symlink-then-write-through": ("out", [(_info("out", sym, str(outside)), None), (_info("out/evil"), b"evil")]),
        # Each link looks harmless by name; on disk `b` -> `.` makes `a` -> `b/..` lead out.
        "symlink-chain": ("a", [(_info("b", sym, "."), None), (_info("a", sym, "b/.."), None)]),
        # The other order: `a` is fine when made, `b` turns it into a way out; the write through it is caught.
        "symlink-chain-write": (
            "a/evil",
            [(_info("a", sym, "b/.."), None), (_info("b", sym, "."), None), (_info("a/evil"), b"evil")],
        ),
        # Same links and no write: the sweep of the finished tree refuses the dangling way out.
        "symlink-chain-dangling": ("a", [(_info("a", sym, "b/.."), None), (_info("b", sym, "."), None)]),
        "hardlink-outside": ("h", [(_info("h", hard, "../evil_target"), None)]),
        "hardlink-absolute": ("h", [(_info("h", hard, "/etc/passwd"), None)]),
        "char-device": ("dev", [(_info("dev", tarfile.CHRTYPE), None)]),
        "fifo": ("pipe", [(_info("pipe", tarfile.FIFOTYPE), None)]),
    }


@pytest.fixture(params=[True, False], ids=["data-filter", "own-extractor"])
def data_filter(request, monkeypatch):
    """Run extraction tests with tarfile's data filter and with the fallback for older Pythons."""
    if request.param and not hasattr(tarfile, "data_filter"):
        pytest.skip("this Python has no tarfile.data_filter")
    monkeypatch.setattr(archives, "_HAS_DATA_FILTER", request.param)
    return request.param


@pytest.mark.parametrize("case", sorted(_unsafe_tars(Path("/x"))))
def test_unsafe_tar_members_are_refused(tmp_path, data_filter, case):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "evil_target").write_text("secret")
    offender, members = _unsafe_tars(outside)[case]
    archive = _tar(tmp_path / "bad.tar.gz", members)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(ErnieDeployError, match="unsafe member") as err:
        safe_extract(archive, sandbox / "dest")
    assert f"unsafe member {offender!r}" in str(err.value)
    assert not (sandbox / "dest").exists()
    assert list(sandbox.iterdir()) == []  # no temp folder left behind
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
    assert list(outside.iterdir()) == []


def test_unsafe_zip_members_are_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    cases = {
        "../evil": None,
        "a/../../evil": None,
        str(outside / "abs_evil"): None,
        "..\\evil": None,
        "link": "/etc/passwd",
        "d/link": "../../outside",
    }
    for i, (name, link) in enumerate(cases.items()):
        archive = tmp_path / f"bad{i}.zip"
        with zipfile.ZipFile(archive, "w") as zf:
            zf.writestr("ok.txt", "ok")
            info = zipfile.ZipInfo(name)
            if link is None:
                zf.writestr(info, "evil")
            else:
                info.create_system = 3
                info.external_attr = (stat.S_IFLNK | 0o777) << 16
                zf.writestr(info, link)
        with zipfile.ZipFile(archive) as zf:
            assert zf.namelist()[-1] == name  # the archive really carries the bad name
        dest = tmp_path / "sandbox" / "dest"
        with pytest.raises(ErnieDeployError, match="unsafe member") as err:
            safe_extract(archive, dest)
        assert repr(name) in str(err.value)
        assert not dest.exists()
    assert list((tmp_path / "sandbox").iterdir()) == []
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "evil").exists()


def test_zip_device_member_is_refused(tmp_path):
    archive = tmp_path / "dev.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        info = zipfile.ZipInfo("dev")
        info.create_system = 3
        info.external_attr = (stat.S_IFCHR | 0o644) << 16
        zf.writestr(info, "")
    with pytest.raises(ErnieDeployError, match="device"):
        safe_extract(archive, tmp_path / "dest")


def _dygraph_members(top: str) -> list:
    return [
        (_info(f"{top}/", tarfile.DIRTYPE), None),
        (_info(f"{top}/model_config.json"), b'{"num_classes": 2}'),
        (_info(f"{top}/model_state.pdparams"), b"weights"),
        (_info(f"{top}/vocab.txt"), b"[PAD]\n[UNK]\n"),
        (_info(f"{top}/tokenizer_config.json", tarfile.SYMTYPE, "model_config.json"), None),  # inside: fine
        (_info(f"{top}/copy.pdparams", tarfile.LNKTYPE, f"{top}/model_state.pdparams"), None),
    ]


@pytest.mark.parametrize("suffix,mode", [(".tar.gz", "w:gz"), (".tgz", "w:gz"), (".tar", "w")])
def test_safe_tar_with_one_top_folder_is_extracted_and_inspected(tmp_path, data_filter, suffix, mode):
    archive = _tar(tmp_path / f"ernie{suffix}", _dygraph_members("ernie-3.0-mini"), mode)
    dest = safe_extract(archive, tmp_path / "out")
    top = dest / "ernie-3.0-mini"
    assert (top / "model_state.pdparams").read_bytes() == b"weights"
    assert (top / "copy.pdparams").read_bytes() == b"weights"
    assert os.readlink(top / "tokenizer_config.json") == "model_config.json"
    ckpt = inspect_checkpoint(dest)
    assert ckpt.kind == "dygraph" and ckpt.root == top
    assert ckpt.config_file == top / "model_config.json"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_safe_zip_is_extracted(tmp_path):
    archive = tmp_path / "static.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("export/", "")
        zf.writestr("export/inference.json", "{}")
        zf.writestr("export/inference.pdiparams", "params")
        zf.writestr("export/vocab.txt", "[PAD]\n")
    dest = safe_extract(archive, tmp_path / "out")
    ckpt = inspect_checkpoint(dest)
    assert ckpt.kind == "static" and ckpt.static_format == "pir"
    assert ckpt.model_file == dest / "export" / "inference.json"


def test_safe_extract_replaces_an_existing_dest(tmp_path):
    dest = tmp_path / "out"
    dest.mkdir()
    (dest / "old").write_text("old")
    safe_extract(_tar(tmp_path / "a.tar.gz", [(_info("new"), b"new")]), dest)
    assert sorted(p.name for p in dest.iterdir()) == ["new"]


def test_safe_extract_rejects_non_archives(tmp_path):
    junk = tmp_path / "model.bin"
    junk.write_bytes(b"not an archive")
    with pytest.raises(ErnieDeployError, match="not a supported archive"):
        safe_extract(junk, tmp_path / "out")
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not gzip")
    with pytest.raises(ErnieDeployError, match="not a readable tar"):
        safe_extract(broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------
# checkpoint layouts
# --------------------------------------------------------------------------------------------------


def _touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_text("x")
    return folder


@pytest.mark.parametrize("config", ["model_config.json", "config.json"])
def test_inspect_dygraph(tmp_path, config):
    root = _touch(tmp_path / "ck", config, "model_state.pdparams", "vocab.txt", "tokenizer_config.json")
    ckpt = inspect_checkpoint(root)
    assert ckpt == Checkpoint(
        "dygraph",
        root,
        params_file=root / "model_state.pdparams",
        vocab_file=root / "vocab.txt",
        config_file=root / config,
    )
    assert ckpt.static_format is None and ckpt.prefix is None


@pytest.mark.parametrize("prefix", ["inference", "model"])
@pytest.mark.parametrize("suffix,fmt", [(".json", "pir"), (".pdmodel", "legacy")])
def test_inspect_static(tmp_path, prefix, suffix, fmt):
    root = _touch(tmp_path / "static", f"{prefix}{suffix}", f"{prefix}.pdiparams", "vocab.txt")
    ckpt = inspect_checkpoint(root)
    assert ckpt.kind == "static" and ckpt.static_format == fmt
    assert ckpt.model_file == root / f"{prefix}{suffix}"
    assert ckpt.params_file == root / f"{prefix}.pdiparams"
    assert ckpt.vocab_file == root / "vocab.txt"
    assert ckpt.prefix == root / prefix


def test_inspect_static_with_vocab_and_config_in_the_parent(tmp_path):
    parent = _touch(tmp_path / "run", "vocab.txt", "config.json")
    root = _touch(parent / "export", "inference.json", "inference.pdiparams", "inference.pdiparams.info")
    ckpt = inspect_checkpoint(root)
    assert ckpt.vocab_file == parent / "vocab.txt" and ckpt.config_file == parent / "config.json"
    # Pointed at the parent, it finds the static model in export/ beside the vocab.
    assert inspect_checkpoint(parent) == ckpt


def test_inspect_static_prefers_pir_and_the_usual_prefix(tmp_path):
    root = _touch(
        tmp_path / "s",
        "inference.json",
        "inference.pdmodel",
        "inference.pdiparams",
        "other.json",
        "other.pdiparams",
        "vocab.txt",
    )
    assert inspect_checkpoint(root).model_file == root / "inference.json"


def test_inspect_static_without_vocab_says_so(tmp_path):
    root = _touch(tmp_path / "a" / "static", "inference.pdmodel", "inference.pdiparams")
    with pytest.raises(ErnieDeployError, match="no vocab.txt"):
        inspect_checkpoint(root)


def test_inspect_dygraph_missing_vocab_names_it(tmp_path):
    root = _touch(tmp_path / "ck", "config.json", "model_state.pdparams")
    with pytest.raises(ErnieDeployError, match="lacks vocab.txt"):
        inspect_checkpoint(root)


def test_inspect_descends_single_folders(tmp_path):
    root = _touch(tmp_path / "x" / "y" / "z", "config.json", "model_state.pdparams", "vocab.txt")
    (tmp_path / "x" / ".DS_Store").write_text("junk")
    assert inspect_checkpoint(tmp_path / "x").root == root


def test_inspect_unknown_layout_lists_found_and_expected(tmp_path):
    root = _touch(tmp_path / "hf", "config.json", "model.safetensors", "vocab.txt")
    with pytest.raises(ErnieDeployError) as err:
        inspect_checkpoint(root)
    message = str(err.value)
    assert "found: config.json, model.safetensors, vocab.txt" in message
    for expected in ("model_state.pdparams", "model_config.json", ".pdiparams", ".pdmodel", "vocab.txt"):
        assert expected in message
    assert "safetensors" in err.value.fix


def test_inspect_missing_path_and_file(tmp_path):
    with pytest.raises(ErnieDeployError, match="no such checkpoint"):
        inspect_checkpoint(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ErnieDeployError, match="is a file"):
        inspect_checkpoint(tmp_path / "f")


# --------------------------------------------------------------------------------------------------
# resolve_checkpoint
# --------------------------------------------------------------------------------------------------


def _dygraph_archive(tmp_path: Path) -> tuple[bytes, str]:
    archive = _tar(tmp_path / "src.tar.gz", _dygraph_members("ernie"))
    data = archive.read_bytes()
    return data, hashlib.sha256(data).hexdigest()


def test_resolve_url_downloads_and_extracts_into_the_cache(server, tmp_path):
    data, digest = _dygraph_archive(tmp_path)
    server.files["/releases/ernie%203.tar.gz"] = data
    url = server.url("/releases/ernie%203.tar.gz")
    ckpt = resolve_checkpoint(url, sha256=digest, workdir=tmp_path / "work")
    cache = tmp_path / "cache"
    assert (cache / "downloads" / digest / "ernie_3.tar.gz").read_bytes() == data
    assert ckpt.kind == "dygraph" and ckpt.root == cache / "extracted" / digest / "ernie"
    # Second time: from the cache, no request.
    requests = len(server.requests)
    assert resolve_checkpoint(url, sha256=digest, workdir=tmp_path / "work") == ckpt
    assert len(server.requests) == requests


def test_resolve_url_requires_sha256(server, tmp_path):
    with pytest.raises(ErnieDeployError, match="sha256"):
        resolve_checkpoint(server.url(), sha256=None, workdir=tmp_path)
    assert server.requests == []


def test_resolve_local_archive_and_folder(tmp_path):
    data, digest = _dygraph_archive(tmp_path)
    archive = tmp_path / "src.tar.gz"
    ckpt = resolve_checkpoint(str(archive), sha256=None, workdir=tmp_path / "work")
    assert ckpt.root == tmp_path / "work" / "extracted" / digest / "ernie"
    assert resolve_checkpoint(str(archive), sha256=digest, workdir=tmp_path / "work") == ckpt
    with pytest.raises(ErnieDeployError, match="mismatch"):
        resolve_checkpoint(str(archive), sha256="1" * 64, workdir=tmp_path / "work")
    assert resolve_checkpoint(str(ckpt.root), sha256=None, workdir=tmp_path / "work") == ckpt
    with pytest.raises(ErnieDeployError, match="folder"):
        resolve_checkpoint(str(ckpt.root), sha256=digest, workdir=tmp_path / "work")


def test_resolve_rejects_missing_and_unsupported_sources(tmp_path):
    with pytest.raises(ErnieDeployError, match="no such checkpoint"):
        resolve_checkpoint(str(tmp_path / "nope"), sha256=None, workdir=tmp_path)
    with pytest.raises(ErnieDeployError, match="unsupported"):
        resolve_checkpoint("s3://bucket/model.tar.gz", sha256=None, workdir=tmp_path)
    weights = tmp_path / "model_state.pdparams"
    weights.write_bytes(b"w")
    with pytest.raises(ErnieDeployError, match="not a supported archive"):
        resolve_checkpoint(str(weights), sha256=None, workdir=tmp_path)
