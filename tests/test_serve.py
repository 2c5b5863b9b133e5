"""Server lifecycle: finding tritonserver, the preflight checks, and a real server on loopback."""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.server import binary as server_binary
from ernie_deploy.server import preflight
from ernie_deploy.server.preflight import MiB
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.procs import group_members

ADD_ONE = textwrap.dedent(
    """
    import numpy as np
    import triton_python_backend_utils as pb_utils


    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
                y = pb_utils.Tensor("y", (x + np.float32(1)).astype(np.float32))
                responses.append(pb_utils.InferenceResponse(output_tensors=[y]))
            return responses
    """
)
BROKEN_MARK = "deliberately broken model 7f3a"
BROKEN = f"raise RuntimeError({BROKEN_MARK!r})\n"


def write_python_model(repo: Path, name: str, model_py: str, count: int = 1, with_group: bool = True) -> Path:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as mc

    config = mc.ModelConfig(name=name, backend="python", max_batch_size=8)
    config.input.add(name="x", data_type=mc.TYPE_FP32, dims=[-1])
    config.output.add(name="y", data_type=mc.TYPE_FP32, dims=[-1])
    if with_group:
        config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU, count=count)
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(text_format.MessageToString(config))
    (repo / name / "1" / "model.py").write_text(model_py)
    return repo


def free_ports_server(repo: Path, **kw) -> TritonServer:
    return TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, log_file=repo.parent / "triton.log", **kw)


# -- /proc helpers: what a process listens on, and who is left in its process group ------------


def _addr(hexaddr: str) -> str:
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening(pid: int) -> set[tuple[str, int]]:
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as fh:
            next(fh)
            for row in fh:
                cols = row.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state == "0A" and inode in inodes:  # 0A = LISTEN
                    host, port = local.split(":")
                    found.add((_addr(host), int(port, 16)))
    return found


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def shm_regions(prefix: str) -> list[str]:
    return [n for n in os.listdir("/dev/shm") if n.startswith(prefix)]


# -- finding the binary -----------------------------------------------------------------------


def _fake_system_install(root: Path, backends=("python", "onnxruntime")) -> Path:
    exe = root / "bin" / "tritonserver"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    for name in backends:
        (root / "backends" / name).mkdir(parents=True)
    return exe


def test_finds_the_wheel_server_and_its_python_backend(monkeypatch):
    monkeypatch.delenv("TRITONSERVER", raising=False)
    binary = server_binary.find_tritonserver()
    assert binary.kind == "pytriton-wheel"
    assert binary.path.is_file() and os.access(binary.path, os.X_OK)
    assert "python" in server_binary.available_backends(binary)
    # The same file named explicitly is recognised as the wheel by its layout.
    assert server_binary.find_tritonserver(str(binary.path)).kind == "pytriton-wheel"


def test_explicit_path_beats_env_and_system_backends_are_listed(tmp_path, monkeypatch):
    from_env = _fake_system_install(tmp_path / "env", backends=("python",))
    explicit = _fake_system_install(tmp_path / "explicit")
    monkeypatch.setenv("TRITONSERVER", str(from_env))
    binary = server_binary.find_tritonserver(explicit)
    assert (binary.path, binary.kind) == (explicit, "system")
    assert server_binary.available_backends(binary) == {"python", "onnxruntime"}
    assert server_binary.find_tritonserver().path == from_env


def test_missing_server_names_the_fix(tmp_path, monkeypatch):
    with pytest.raises(ErnieDeployError, match="--tritonserver"):
        server_binary.find_tritonserver(tmp_path / "nope" / "tritonserver")
    monkeypatch.delenv("TRITONSERVER", raising=False)
    monkeypatch.setattr(server_binary, "_wheel_binary", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ErnieDeployError) as err:
        server_binary.find_tritonserver()
    assert "pip install nvidia-pytriton" in str(err.value) and "--tritonserver" in str(err.value)


def test_prepared_backend_dir_is_cached_and_safe_to_race(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_CACHE", str(tmp_path / "cache"))
    binary = server_binary.find_tritonserver()
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(server_binary.prepared_backend_dir(binary))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    prepared = results[0]
    assert prepared.parent == tmp_path / "cache" / "triton-backends"
    assert os.access(prepared / "python" / "triton_python_backend_stub", os.X_OK)
    assert (prepared / "python" / "libtriton_python.so").is_file()
    assert [p.name for p in prepared.parent.iterdir()] == [prepared.name]  # no temporary left behind


# -- preflight ----------------------------------------------------------------------------------


def test_counts_python_instances(tmp_path, monkeypatch):
    monkeypatch.setattr(preflight, "gpu_count", lambda: 0)
    write_python_model(tmp_path, "two", ADD_ONE, count=2)
    write_python_model(tmp_path, "default_group", ADD_ONE, with_group=False)
    (tmp_path / "ens").mkdir()
    (tmp_path / "ens" / "config.pbtxt").write_text('name: "ens"\nplatform: "ensemble"\n')
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "config.pbtxt").write_text(
        'name: "onnx"\nbackend: "onnxruntime"\ninstance_group [ { kind: KIND_CPU count: 4 } ]\n'
    )
    assert preflight.python_instance_count(tmp_path) == 3
    monkeypatch.setattr(preflight, "gpu_count", lambda: 2)
    assert preflight.python_instance_count(tmp_path) == 2 + 2  # an unset group means one per GPU


def test_shm_preflight_fails_early_with_the_fix(tmp_path, monkeypatch):
    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE, count=3)
    real_statvfs = os.statvfs

    class Tiny:
        f_bavail, f_frsize = 8, MiB  # 8 MiB free: docker's default is 64, a tight compose file less

    monkeypatch.setattr(preflight.os, "statvfs", lambda p: Tiny() if str(p) == "/dev/shm" else real_statvfs(p))
    server = free_ports_server(repo)
    with pytest.raises(ErnieDeployError) as err:
        server.start()
    message = str(err.value)
    assert "/dev/shm has 8.0 MiB free" in message and "3 Python-backend model instance(s)" in message
    assert "--shm-size=" in message and "shm_size" in message and "--shm-default-byte-size" in message
    assert server.pid is None  # nothing was spawned
    monkeypatch.setattr(preflight.os, "statvfs", real_statvfs)
    # Without faking anything: ask for more per instance than any /dev/shm holds.
    with pytest.raises(ErnieDeployError, match="/dev/shm has .* free, but"):
        free_ports_server(repo, shm_default_byte_size=1 << 50).start()
    # And a repository without python models needs none.
    assert preflight.check_shm(tmp_path / "empty_repo_does_not_exist") == 0


def test_taken_port_is_reported_before_spawning(tmp_path):
    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = TritonServer(repo, http_port=0, grpc_port=port, metrics_port=0)
        with pytest.raises(ErnieDeployError, match=f"127.0.0.1:{port} for the grpc endpoint") as err:
            server.start()
    assert "--grpc-port" in str(err.value) and server.pid is None


def test_missing_repository(tmp_path):
    with pytest.raises(ErnieDeployError, match="does not exist"):
        free_ports_server(tmp_path / "nope").start()


# -- a real server ------------------------------------------------------------------------------


@pytest.mark.integration
def test_real_server_serves_over_grpc_on_loopback_and_stops_cleanly(tmp_path):
    import tritonclient.grpc as grpcclient

    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    with free_ports_server(repo) as server:
        assert server.grpc_url == f"127.0.0.1:{server.ports['grpc']}"
        client = grpcclient.InferenceServerClient(url=server.grpc_url)
        try:
            assert client.is_model_ready("add_one")
            x = np.arange(6, dtype=np.float32).reshape(2, 3)
            request = grpcclient.InferInput("x", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            result = client.infer("add_one", [request], outputs=[grpcclient.InferRequestedOutput("y")])
        finally:
            client.close()
        np.testing.assert_array_equal(result.as_numpy("y"), x + 1)

        # Bound to loopback only, on exactly the three ports asked for.
        bound = listening(server.pid)
        assert {port for _, port in bound} == set(server.ports.values())
        assert {addr for addr, _ in bound} <= {"127.0.0.1", "::ffff:127.0.0.1"}, bound
        pid, prefix = server.pid, server.shm_prefix
        assert len(group_members(pid)) >= 2  # the server and the model's python stub
        assert len(shm_regions(prefix)) == 1  # one region per python instance
        server.stop()
        # Graceful: Triton exits 0 on SIGTERM, and takes its stubs, ports and shm with it.
        assert server.returncode == 0 and not server.is_running()
        assert group_members(pid) == []
        assert all(port_is_free(p) for p in server.ports.values())
        assert shm_regions(prefix) == []
    print(f"\nstart {server.start_seconds:.2f} s, stop {server.stop_seconds:.2f} s")


@pytest.mark.parametrize(
    "extra, on",
    [
        ((), True),
        (("--allow-metrics=false",), False),
        (("--allow-metrics", "0"), False),
        (("--allow-metrics=false", "--allow-metrics=true"), True),  # the last one given counts
    ],
)
def test_metrics_are_waited_for_unless_turned_off(tmp_path, extra, on):
    assert TritonServer(tmp_path, extra_args=extra)._metrics_on() is on


@pytest.mark.integration
def test_ready_includes_metrics_and_a_server_without_them_starts(tmp_path):
    from ernie_deploy.client.metrics import scrape

    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    with free_ports_server(repo) as server:
        assert scrape(server.metrics_url)  # answered at once: ready includes /metrics
    with free_ports_server(repo, extra_args=["--allow-metrics=false"]) as server:
        assert server.ports["metrics"] not in {port for _, port in listening(server.pid)}


@pytest.mark.integration
def test_kill_fallback_leaves_nothing_behind(tmp_path):
    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE, count=2)
    server = free_ports_server(repo).start()
    pid, prefix = server.pid, server.shm_prefix
    assert len(shm_regions(prefix)) == 2
    code = server.stop(timeout=0)  # no grace period: straight to SIGKILL for the whole group
    assert code == -signal.SIGKILL
    assert group_members(pid) == []
    assert shm_regions(prefix) == []  # the regions a killed server leaks are swept
    assert all(port_is_free(p) for p in server.ports.values())


@pytest.mark.integration
def test_broken_model_fails_fast_with_the_servers_error(tmp_path):
    repo = write_python_model(tmp_path / "repo", "good", ADD_ONE)
    write_python_model(repo, "broken", BROKEN)
    server = free_ports_server(repo)
    t0 = time.monotonic()
    with pytest.raises(ErnieDeployError) as err:
        server.start(timeout=60)
    assert time.monotonic() - t0 < 30  # --exit-on-error: no waiting for the timeout
    message = str(err.value)
    assert "exited with code" in message and "before it was ready" in message
    assert BROKEN_MARK in message and "failed to load 'broken'" in message
    assert "fix: fix the model named above" in message
    assert "CudaDriverHelper" not in message  # CPU-machine noise is left out
    assert not server.is_running() and group_members(server.pid) == []


def _can_shrink_shm() -> bool:
    probe = "mount -t tmpfs -o size=1m tmpfs /dev/shm"
    try:
        return subprocess.run(["unshare", "-m", "sh", "-c", probe], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.integration
@pytest.mark.skipif(not _can_shrink_shm(), reason="needs unshare -m and mount (root in a container)")
def test_server_side_shm_failure_is_explained(tmp_path):
    """If /dev/shm runs out anyway (the preflight is skipped here), the error still names the fix."""

    class SmallShm(TritonServer):
        def command(self):  # the same server, in a private mount namespace with a 2 MiB /dev/shm
            shrink = 'mount -t tmpfs -o size=2m tmpfs /dev/shm && exec "$@"'
            return ["unshare", "-m", "sh", "-c", shrink, "sh", *super().command()]

    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    server = SmallShm(repo, http_port=0, grpc_port=0, metrics_port=0, shm_preflight=False)
    with pytest.raises(ErnieDeployError) as err:
        server.start(timeout=60)
    message = str(err.value)
    assert "No space left on device" in message
    assert "--shm-size" in message and "--shm-default-byte-size" in message


@pytest.mark.integration
def test_serve_forever_stops_cleanly_on_sigterm(tmp_path):
    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    code = (
        "import sys; from ernie_deploy.server.serve import serve_forever; "
        "sys.exit(serve_forever(sys.argv[1], http_port=0, grpc_port=0, metrics_port=0))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(repo)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True).start()
    output: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while not any("Press Ctrl-C" in line for line in output):
            output.append(lines.get(timeout=max(0.1, deadline - time.monotonic())))
        text = "".join(output)
        assert "grpc:    127.0.0.1:" in text and "http:    http://127.0.0.1:" in text
        server_pid = int(text.split("(pid ", 1)[1].split(",", 1)[0])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.2)  # let the reader thread drain
    while not lines.empty():
        output.append(lines.get())
    assert "tritonserver stopped" in "".join(output)
    assert group_members(server_pid) == []
