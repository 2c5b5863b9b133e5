"""`tritonserver` in the project's environment (server/launcher.py, cli/tritonserver.py): Triton's command line read
into the pip server's setup, every option it cannot honour refused by name, a real tritonserver never shadowed, and
the promised flow run exactly as a user runs it: convert.sh, `tritonserver --model-repository=models`, the client."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ernie_deploy.core.endpoints import PORTS
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.server.binary import find_tritonserver
from ernie_deploy.server.launcher import REFUSED, TRITON_OPTIONS, installed_tritonserver, parse_triton_args
from tests.conftest import checkout_copy, shipped_scores, wait_until_ready

VENV_BIN = Path(sys.executable).parent
LAUNCHER = VENV_BIN / "tritonserver"
ACCURACY_LINE = re.compile(r"^accuracy: (0\.\d{4}) \(n=(\d+)\)$", re.M)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERNIE_DEPLOY_ADMIN_KEY")}
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"  # as `source .venv/bin/activate` leaves it
    return env | extra


# -- Triton's command line ------------------------------------------------------------------------------------------


def test_reads_tritons_options_into_the_pip_servers_setup():
    request = parse_triton_args(
        [
            "--model-repository",
            "models",
            "--grpc-port=9001",
            "--http-port",
            "9000",
            "--grpc-address=0.0.0.0",
            "--log-verbose=1",
            "--backend-config=python,shm-default-byte-size=8388608",
            "--backend-config=onnxruntime,default-max-batch-size=8",
            "--cache-config=local,size=0",
            "--disable-auto-complete-config",
            "--model-control-mode=explicit",
            "--load-model",
            "ernie_seqcls",
        ]
    )
    assert request.repository == "models"
    assert request.ports == {"grpc": 9001, "http": 9000}
    assert (request.grpc_host, request.http_host) == ("0.0.0.0", None)  # HTTP stays on loopback unless asked
    assert request.log_verbose == 1
    assert request.shm == {"shm_default_byte_size": 8388608}
    assert request.cache_bytes == 0
    # what the launcher does not set itself goes to tritonserver as given
    assert request.extra == [
        "--backend-config=onnxruntime,default-max-batch-size=8",
        "--disable-auto-complete-config",
        "--model-control-mode=explicit",
        "--load-model=ernie_seqcls",
    ]


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_options_it_cannot_honour_are_refused_by_name(option):
    assert option in TRITON_OPTIONS  # each is Triton's own
    with pytest.raises(ErnieDeployError, match=f"--{option} is not supported by the pip server") as info:
        parse_triton_args(["--model-repository=models", f"--{option}=x"])
    assert info.value.fix


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--model-repository=models", "--no-such-option=1"], "tritonserver has no option --no-such-option"),
        (["models"], "unexpected argument 'models'"),
        (["--model-repository=a", "--model-store=b"], "more than one --model-repository"),
        ([], "no --model-repository given"),
        (["--model-repository=m", "--http-port=eighty"], "--http-port='eighty' is not an integer"),
        (["--model-repository"], "--model-repository needs a value"),
        (["--model-repository=m", "--disable-auto-complete-config=true"], "takes no value"),
        (["--model-repository=m", "--allow-http=false"], "--allow-http=false is not supported"),
        (["--model-repository=m", "--http-address=127.0.0.1", "--metrics-address=0.0.0.0"], "differ"),
        (["--model-repository=m", "--cache-config=redis,host=r"], "local cache only"),
        (["--model-repository=m", "--backend-config=python,shm-region-prefix-name=x"], "shm-region-prefix-name"),
    ],
)
def test_bad_command_lines_are_refused_with_the_problem_named(argv, problem):
    with pytest.raises(ErnieDeployError, match=re.escape(problem)) as info:
        parse_triton_args(argv)
    assert info.value.fix


def test_refusals_reach_the_user_as_one_error_and_exit_status_2(tmp_path):
    for argv, problem in [
        (["--backend-directory=/opt/x", "--model-repository=models"], "--backend-directory is not supported"),
        # reachable from other machines, and no key given: refused before anything starts
        (["--model-repository=models", "--grpc-address=0.0.0.0"], "reachable from other machines"),
    ]:
        result = subprocess.run(
            [str(LAUNCHER), *argv], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 2, result
        assert result.stderr.startswith("tritonserver: error: ") and problem in result.stderr
        assert "  fix: " in result.stderr
        assert "Traceback" not in result.stderr


def test_help_shows_the_setup_and_tritons_own_options(tmp_path):
    result = subprocess.run([str(LAUNCHER), "--help"], cwd=tmp_path, env=_env(), capture_output=True, text=True)
    assert result.returncode == 0, result
    assert "nvidia-pytriton" in result.stdout
    for option in ("--model-repository", "--grpc-port", "--backend-config"):  # from the binary's own --help
        assert f"  {option} <" in result.stdout


def test_the_options_known_are_those_of_the_wheels_server():
    """The launcher refuses a name Triton does not know before starting anything: its list must be the binary's."""
    from ernie_deploy.server.binary import server_env

    binary = find_tritonserver()
    shown = subprocess.run(
        [str(binary.path), "--help"], env=server_env(binary), capture_output=True, text=True, timeout=60
    )
    options = dict(re.findall(r"^  --([a-z0-9-]+)( <)?", shown.stdout + shown.stderr, re.M))
    assert {name: bool(value) for name, value in options.items()} == TRITON_OPTIONS


# -- never shadowing a real server ----------------------------------------------------------------------------------


def test_an_installed_tritonserver_runs_instead_with_the_arguments_untouched(tmp_path):
    real = tmp_path / "bin" / "tritonserver"
    real.parent.mkdir()
    real.write_text('#!/bin/sh\nprintf "%s\\n" "real server" "$@"\n')
    real.chmod(0o755)
    # the launcher comes first on PATH, as in an activated environment; the real server after it
    env = _env(PATH=os.pathsep.join([str(VENV_BIN), str(real.parent), "/usr/bin", "/bin"]))
    argv = ["--model-repository=/models", "--backend-directory=/opt/tritonserver/backends", "--x-not-checked"]
    result = subprocess.run([str(LAUNCHER), *argv], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result
    assert result.stdout.splitlines() == ["real server", *argv]


def test_the_ngc_server_is_found_off_path_and_neither_launcher_nor_wheel_counts(tmp_path):
    ngc = tmp_path / "opt" / "tritonserver"
    ngc.parent.mkdir()
    ngc.write_text("#!/bin/sh\n")
    ngc.chmod(0o755)
    wheel_bin = find_tritonserver().path.parent
    assert installed_tritonserver(f"{VENV_BIN}{os.pathsep}{wheel_bin}", ngc=tmp_path / "absent") is None
    assert installed_tritonserver(f"{VENV_BIN}{os.pathsep}{wheel_bin}", ngc=ngc) == ngc


# -- the promised flow ----------------------------------------------------------------------------------------------


def _port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.integration
def test_convert_then_tritonserver_then_the_client_prints_the_accuracy(tmp_path):
    busy = [port for port in PORTS.values() if _port_in_use(port)]
    assert not busy, f"ports {busy} are taken: the promised flow uses Triton's default ports; stop what holds them"
    project = checkout_copy(tmp_path / "project")
    env = _env()
    env["PATH"] = f"{project / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"

    convert = subprocess.run(
        ["bash", "scripts/convert.sh"], cwd=project, env=env, capture_output=True, text=True, timeout=3600
    )
    assert convert.returncode == 0, convert.stdout[-3000:] + convert.stderr[-3000:]
    assert sorted(p.parent.name for p in (project / "models").glob("*/config.pbtxt")) == [
        "ernie_seqcls",
        "ernie_tokencls",
    ]

    log = open(tmp_path / "tritonserver.out", "w+")
    server = subprocess.Popen(
        ["tritonserver", "--model-repository=models"], cwd=project, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        wait_until_ready(server, PORTS["http"], tmp_path / "tritonserver.out", timeout=300)

        client = subprocess.run(
            [sys.executable, "clients/seq_cls_grpc_client.py"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert client.returncode == 0, client.stderr
        found = ACCURACY_LINE.findall(client.stdout)
        assert found, client.stdout[-2000:]
        accuracy, n = float(found[-1][0]), int(found[-1][1])
        assert n == 1000
        # the shipped demo classifier's own score, as the client prints it
        assert accuracy == round(shipped_scores("seq_cls")["test"], 4)
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C, as the user stops it
        code = server.wait(timeout=60)
    out = (tmp_path / "tritonserver.out").read_text()
    assert "pytriton-wheel" in out and "admin key:" in out
    assert code == 0, out
    assert "tritonserver stopped" in out
    assert not any(_port_in_use(port) for port in PORTS.values()), "the server outlived its launcher"
