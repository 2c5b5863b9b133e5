"""The admin key: Triton's model-repository and model-config APIs answer only with it, everything else without.

- Unit: where the key comes from (file, env, generated), what is refused, the flags built from it, the image's
  wrapper script (run here with /bin/sh) writing the same flags, and `serve`'s default without a key.
- Integration: a real pip tritonserver started with a key, asked over HTTP and gRPC without the key, with a
  wrong one and with the right one; inference, health and `ernie-deploy probe` need none; the stub watchdog
  (which reloads through the restricted API) still brings back a killed stub.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from ernie_deploy.cli import main
from ernie_deploy.core.admin_key import (
    ADMIN_KEY_ENV,
    ADMIN_KEY_FILE_ENV,
    ADMIN_KEY_HEADER,
    admin_key_from,
    check_admin_key,
    make_admin_key,
    read_admin_key_file,
    write_new_admin_key,
)
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.deployfiles import kubernetes
from ernie_deploy.deployfiles.pod import KEY_WRAPPER, secret_command, secret_name
from ernie_deploy.server.args import restricted_args
from ernie_deploy.server.binary import SYSTEM, TritonBinary
from ernie_deploy.server.process import TritonServer
from ernie_deploy.server.serve import admin_key_for, is_loopback

ROOT = Path(__file__).resolve().parents[1]
WRAPPER = ROOT / "docker" / "restrict-admin-apis.sh"
KEY = "k3y-for-tests_0123456789abcdef"


# -- where the key comes from -------------------------------------------------------------------------------


def test_key_from_the_environment_variable():
    key = admin_key_from(environ={ADMIN_KEY_ENV: KEY})
    assert key.value == KEY and key.headers() == {ADMIN_KEY_HEADER: KEY}
    assert key.headers(grpc=True) == {f"triton-grpc-protocol-{ADMIN_KEY_HEADER}": KEY}
    assert ADMIN_KEY_ENV in key.source and KEY not in repr(key)  # a printed key is a leaked key


def test_key_from_a_file_drops_the_line_end_and_wins_over_the_environment(tmp_path):
    path = tmp_path / "admin-key"
    path.write_text(KEY + "\n")
    assert admin_key_from(path, {ADMIN_KEY_ENV: "another-key-0123456789"}).value == KEY
    path.write_bytes(KEY.encode() + b"\r\n")
    assert read_admin_key_file(path).value == KEY
    # The file named by ERNIE_DEPLOY_ADMIN_KEY_FILE (the Docker and Kubernetes secret-mount style).
    assert admin_key_from(environ={ADMIN_KEY_FILE_ENV: str(path), ADMIN_KEY_ENV: "x" * 20}).value == KEY


def test_no_key_anywhere_is_none_but_an_empty_or_missing_one_is_an_error(tmp_path):
    assert admin_key_from(environ={}) is None
    assert admin_key_from(environ={ADMIN_KEY_FILE_ENV: ""}) is None  # unset in compose's style
    empty = tmp_path / "empty"
    empty.write_text("\n")
    with pytest.raises(ErnieDeployError, match=f"the admin key from the file {empty} is empty"):
        admin_key_from(empty, {})
    with pytest.raises(ErnieDeployError, match=f"the admin key from the environment variable {ADMIN_KEY_ENV} is empty"):
        admin_key_from(environ={ADMIN_KEY_ENV: ""})
    with pytest.raises(ErnieDeployError, match="does not exist") as err:
        admin_key_from(tmp_path / "nowhere", {})
    assert "mount the secret there" in str(err.value)


@pytest.mark.parametrize("bad", ["changeme", "has a space in it 0123", "comma,splits-triton-flag", "ключ" * 5])
def test_weak_or_unsendable_keys_are_refused_with_the_fix(bad):
    with pytest.raises(ErnieDeployError, match="not usable") as err:
        check_admin_key(bad, "test")
    assert "secrets.token_urlsafe(32)" in str(err.value)


def test_a_generated_key_is_in_a_private_file(tmp_path):
    key, path = write_new_admin_key(tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert read_admin_key_file(path).value == key.value
    assert len(key.value) == 43 and make_admin_key() != key.value
    assert [p.name for p in path.parent.iterdir()] == ["admin-key"]  # no staging file left beside it


# -- the flags, on the launcher and in the image ---------------------------------------------------------------


def test_restricted_args_cover_repository_and_config_on_both_protocols():
    assert restricted_args(KEY) == [
        f"--http-restricted-api=model-repository,model-config:{ADMIN_KEY_HEADER}={KEY}",
        f"--grpc-restricted-protocol=model-repository,model-config:{ADMIN_KEY_HEADER}={KEY}",
    ]


def test_launcher_adds_the_flags_only_with_a_key(tmp_path):
    binary = TritonBinary(tmp_path / "bin" / "tritonserver", tmp_path / "backends", SYSTEM)
    plain = TritonServer(tmp_path / "repo", extra_args=["--log-info=true"])
    plain.binary = binary
    assert not any("restricted" in a for a in plain.command())
    path = tmp_path / "key"
    path.write_text(KEY + "\n")
    for server in (
        TritonServer(tmp_path / "repo", admin_key=KEY, extra_args=["--log-info=true"]),
        TritonServer(tmp_path / "repo", admin_key_file=path, extra_args=["--log-info=true"]),
    ):
        server.binary = binary
        argv = server.command()
        assert argv[-3:] == [*restricted_args(KEY), "--log-info=true"]  # the caller's extra args come last
        assert KEY not in server._shown(argv) and "<admin key>" in server._shown(argv)
    with pytest.raises(ErnieDeployError, match="not usable"):
        TritonServer(tmp_path / "repo", admin_key="short")


def run_wrapper(env: dict[str, str], *command: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ERNIE_DEPLOY_ADMIN_KEY")}
    return subprocess.run(
        ["/bin/sh", str(WRAPPER), *command], env={**clean, **env}, capture_output=True, text=True, timeout=10
    )


def test_the_images_wrapper_adds_the_launchers_flags(tmp_path):
    printed = run_wrapper({ADMIN_KEY_ENV: KEY}, "printf", "%s\\n", "tritonserver", "--model-repository=/models")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == ["tritonserver", "--model-repository=/models", *restricted_args(KEY)]
    path = tmp_path / "admin-key"
    path.write_bytes(KEY.encode() + b"\r\n")
    printed = run_wrapper({ADMIN_KEY_FILE_ENV: str(path), ADMIN_KEY_ENV: "y" * 20}, "printf", "%s\\n", "x")
    assert printed.stdout.splitlines() == ["x", *restricted_args(KEY)]
    # The server and its python models do not inherit the key.
    env = run_wrapper({ADMIN_KEY_ENV: KEY}, "sh", "-c", "env", "sh")  # the flags land in $1 and $2, unused
    assert env.returncode == 0 and "ERNIE_DEPLOY_ADMIN_KEY" not in env.stdout


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "no admin key for the model-repository and model-config APIs"),
        ({ADMIN_KEY_ENV: ""}, "is empty"),
        ({ADMIN_KEY_ENV: "short-key"}, "shorter than 16 characters"),
        ({ADMIN_KEY_ENV: "comma,in-the-key-0123"}, "has characters other than"),
        ({ADMIN_KEY_FILE_ENV: "/nonexistent/admin-key"}, "cannot be read"),
    ],
)
def test_the_images_wrapper_refuses_to_start_without_a_usable_key(env, message):
    done = run_wrapper(env, "echo", "started")
    assert done.returncode == 2 and "started" not in done.stdout
    assert message in done.stderr and "fix:" in done.stderr


def test_the_deployment_mounts_the_key_from_a_secret_and_holds_none():
    objects = kubernetes.manifests(ROOT / "models")
    pod = objects["deployment.yaml"]["spec"]["template"]["spec"]
    container = pod["containers"][0]  # Triton's; the gateway beside it needs no key
    assert container["args"][:2] == [KEY_WRAPPER, "tritonserver"]
    env = {e["name"]: e["value"] for e in container["env"]}
    key_file = Path(env[ADMIN_KEY_FILE_ENV])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == key_file.parent]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == secret_name("ernie-deploy") and key_file.name == "admin-key"
    # The command that makes the Secret names the same Secret and entry, and carries no key itself.
    command = secret_command()
    assert f"generic {volume['secret']['secretName']} --from-file={key_file.name}=/dev/stdin" in command
    assert "token_urlsafe(32)" in command
    assert all(o["kind"] != "Secret" for o in objects.values())


# -- serve's default ---------------------------------------------------------------------------------------------


def test_loopback_hosts():
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.5", "example.com"]))


def test_serve_without_a_key_generates_one_on_loopback_and_refuses_elsewhere(tmp_path, monkeypatch, capsys):
    key, generated = admin_key_for("127.0.0.1", environ={})
    try:
        assert generated is not None and read_admin_key_file(generated).value == key.value
    finally:
        shutil.rmtree(generated.parent)
    key, generated = admin_key_for("0.0.0.0", environ={ADMIN_KEY_ENV: KEY})
    assert key.value == KEY and generated is None
    for name in (ADMIN_KEY_ENV, ADMIN_KEY_FILE_ENV):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "models").mkdir()
    assert main(["serve", "-r", str(tmp_path / "models"), "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert "reachable from other machines, and no admin key is set" in err
    assert f"export {ADMIN_KEY_ENV}=" in err and "--admin-key-file" in err


# -- against a real server ----------------------------------------------------------------------------------------

GOOD = "新华社北京电国足公布世预赛名单"


@pytest.fixture(scope="module")
def keyed_server(repository, tmp_path_factory):
    log = tmp_path_factory.mktemp("keyed") / "server.log"
    with TritonServer(repository, http_port=0, grpc_port=0, metrics_port=0, log_file=log, admin_key=KEY) as server:
        yield server


def _http(url: str, method: str = "GET", headers: dict | None = None) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    data = b"{}" if method == "POST" else None
    try:
        with opener.open(urllib.request.Request(url, data=data, headers=headers or {}, method=method), timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.integration
def test_repository_and_config_apis_need_the_key_over_http(keyed_server):
    url = keyed_server.http_url
    for path, method in [
        ("/v2/repository/index", "POST"),
        ("/v2/models/ernie_seqcls/config", "GET"),
        ("/v2/repository/models/ernie_seqcls/unload", "POST"),
    ]:
        assert _http(url + path, method) == 403, path
        assert _http(url + path, method, {ADMIN_KEY_HEADER: "wrong-key-0123456789"}) == 403, path
    assert _http(url + "/v2/repository/index", "POST", {ADMIN_KEY_HEADER: KEY}) == 200
    # The header name is case-insensitive over HTTP.
    assert _http(url + "/v2/models/ernie_seqcls/config", "GET", {ADMIN_KEY_HEADER.upper(): KEY}) == 200
    # Open without a key: health, metadata, statistics, metrics.
    for path in ("/v2/health/live", "/v2/health/ready", "/v2", "/v2/models/ernie_seqcls", "/v2/models/stats"):
        assert _http(url + path) == 200, path
    assert _http(keyed_server.metrics_url) == 200
    # The launcher's own flags are the ones the binary accepts (it refuses the comma form its --help shows).
    assert all(arg in keyed_server.command() for arg in restricted_args(KEY))
    assert KEY not in keyed_server.log_text()  # the launcher's log shows the argv with the key masked


@pytest.mark.integration
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unload_and_load_need_the_right_key(keyed_server, protocol):
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.client.grpc_client import Client
    from ernie_deploy.core.tasks import SEQ_CLS

    url = keyed_server.grpc_url if protocol == "grpc" else keyed_server.http_url
    with RepositoryAdmin(url, None) as anonymous:
        with pytest.raises(ErnieDeployError, match="behind an admin key, and none was sent") as err:
            anonymous.unload("ernie_seqcls")
        assert ADMIN_KEY_ENV in str(err.value) and ADMIN_KEY_HEADER in str(err.value)
        with pytest.raises(ErnieDeployError, match="none was sent"):
            anonymous.load("ernie_seqcls")
        with pytest.raises(ErnieDeployError, match="none was sent"):
            anonymous.index()
        assert anonymous.is_ready("ernie_seqcls")  # refused: nothing was unloaded
    with RepositoryAdmin(url, "wrong-key-0123456789") as wrong:
        with pytest.raises(ErnieDeployError, match="refused the admin key from the key argument") as err:
            wrong.unload("ernie_seqcls")
        assert "use the server's key" in str(err.value)
        assert wrong.is_ready("ernie_seqcls")
    with RepositoryAdmin(url, KEY) as admin:
        assert {"ernie_seqcls", "ernie_tokencls"} <= {m["name"] for m in admin.index(ready=True)}
        assert admin.config("ernie_seqcls")["parameters"]["layout"]["string_value"] == "fused"
        admin.unload("ernie_seqcls")
        deadline = time.monotonic() + 30
        while admin.is_ready("ernie_seqcls") and time.monotonic() < deadline:
            time.sleep(0.1)  # unloading completes after the call returns
        assert not admin.is_ready("ernie_seqcls")
        admin.load("ernie_seqcls")
        assert admin.is_ready("ernie_seqcls")
        with pytest.raises(ErnieDeployError, match="failed on") as err:  # not a key problem: said as it is
            admin.load("no_such_model")
        assert "admin key" not in str(err.value)
    # Inference needs no key, and the reloaded model answers.
    with Client(SEQ_CLS, keyed_server.grpc_url) as client:
        (answer,) = client.predict([GOOD], progress=False)
    assert answer


@pytest.mark.integration
def test_admin_client_takes_the_key_from_the_environment(keyed_server, monkeypatch, tmp_path):
    from ernie_deploy.client.admin import RepositoryAdmin

    monkeypatch.delenv(ADMIN_KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(ADMIN_KEY_ENV, KEY)
    with RepositoryAdmin.from_env(keyed_server.grpc_url) as admin:
        assert admin.index()
    path = tmp_path / "key"
    path.write_text("wrong-key-0123456789\n")
    with RepositoryAdmin.from_env(keyed_server.grpc_url, key_file=path) as admin:
        with pytest.raises(ErnieDeployError, match=f"refused the admin key from the file {path}"):
            admin.index()


@pytest.mark.integration
def test_probe_needs_no_key(keyed_server):
    from ernie_deploy.server.probe import probe

    results = probe(keyed_server.http_url)
    assert [r.model for r in results] == ["ernie_seqcls", "ernie_tokencls"] and all(r.ok for r in results)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERNIE_DEPLOY_ADMIN_KEY")}
    cli = subprocess.run(
        [sys.executable, "-m", "ernie_deploy.cli", "probe", "--http-url", keyed_server.http_url],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert cli.stdout.splitlines()[0].startswith("ok ernie_seqcls")


@pytest.mark.integration
def test_the_watchdog_reloads_a_killed_stub_through_the_restricted_api(keyed_server):
    """The watchdog reloads through load_model, a restricted call: it must send the key."""
    from ernie_deploy.server.watchdog import stub_processes

    before = len(keyed_server.watchdog.restarts)
    # After a test above loaded the ensemble again, its composing models run new stubs and the old ones exit
    # 1-3 s later (measured): kill only once the stubs are back to one set.
    watchdog, deadline = keyed_server.watchdog, time.monotonic() + 30
    while Counter(stub_processes(keyed_server.pid).values()) != watchdog._expected and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = [p for p, model in stub_processes(keyed_server.pid).items() if model == "ernie_seqcls"]
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while len(keyed_server.watchdog.restarts) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    (event,) = keyed_server.watchdog.restarts[before:]
    assert event.ok, event.message


@pytest.mark.integration
def test_grpc_wants_the_prefixed_header(keyed_server):
    """Triton's gRPC server looks for triton-grpc-protocol-<header>: the bare header name is no key there."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(keyed_server.grpc_url)
    try:
        with pytest.raises(InferenceServerException, match="expecting header 'triton-grpc-protocol-ernie-deploy-admin"):
            client.get_model_repository_index(headers={ADMIN_KEY_HEADER: KEY})
        with pytest.raises(InferenceServerException) as err:
            client.unload_model("ernie_seqcls")
        assert err.value.status() == "StatusCode.UNAVAILABLE"  # the code of "down", hence the text check in admin.py
        assert client.get_model_repository_index(headers={f"triton-grpc-protocol-{ADMIN_KEY_HEADER}": KEY})
    finally:
        client.close()


@pytest.mark.integration
def test_serve_on_loopback_without_a_key_generates_one_and_removes_it_on_stop(tmp_path):
    """`ernie-deploy serve` as a user runs it, with no key set: restricted with a generated key, printed once."""
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.server.preflight import free_ports

    from .test_serve import ADD_ONE, write_python_model

    repo = write_python_model(tmp_path / "repo", "add_one", ADD_ONE)
    http, grpc, metrics = free_ports(3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERNIE_DEPLOY_ADMIN_KEY")}
    argv = [sys.executable, "-m", "ernie_deploy.cli", "serve", "--repository", str(repo)]
    argv += ["--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        notice = ""
        for _ in range(20):  # before it, at most a few warnings from imports
            notice += proc.stderr.readline()
            if "generated for this run in " in notice:
                break
        assert "one was generated for this run in " in notice, notice
        path = Path(notice.split("generated for this run in ", 1)[1].split(" (mode 0600", 1)[0])
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        notice += proc.stderr.readline() + proc.stderr.readline()
        stats = notice.split("`ernie-deploy stats", 1)[1].split("`", 1)[0]  # the line it prints, as printed
        assert stats == f" --http-url http://127.0.0.1:{http} --admin-key-file {path}", notice
        deadline = time.monotonic() + 120
        while "Triton is ready" not in proc.stdout.readline() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
        # The command it printed reads the configs (warm-up known); without the key, warm-up is `?`.
        for options, warm in ((stats, "0"), (stats.split(" --admin-key-file")[0], "?")):
            shown = subprocess.run(
                [sys.executable, "-m", "ernie_deploy.cli", "stats", *shlex.split(options)],
                capture_output=True,
                text=True,
                env=env,
            )
            assert shown.returncode == 0, shown.stderr
            (row,) = [line.split() for line in shown.stdout.splitlines() if line.startswith("  add_one ")]
            assert row[2] == warm, shown.stdout
        with RepositoryAdmin(f"127.0.0.1:{grpc}", None) as anonymous:
            with pytest.raises(ErnieDeployError, match="none was sent"):
                anonymous.index()
        with RepositoryAdmin(f"127.0.0.1:{grpc}", read_admin_key_file(path)) as admin:
            assert [m["name"] for m in admin.index()] == ["add_one"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    assert proc.returncode == 0
    assert not path.exists() and not path.parent.exists()
