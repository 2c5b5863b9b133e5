"""gRPC over TLS and mutual TLS, end to end, with certificates made here (a CA, a server certificate for 127.0.0.1
and localhost, a client certificate, and a stranger's CA and client certificate).

- Unit: the TLS values refuse half-given or unusable files by name; `serve`, the clients, `probe`, `soak` and `bench`
  say what is wrong before anything starts; the launcher's, perf_analyzer's and the image wrapper's flags; the
  Kubernetes Deployment mounts the TLS Secret and keeps its HTTP probes.
- Integration: a real tritonserver serving gRPC over TLS answers a TLS client (the gRPC client, the client script,
  the asyncio load generator, the repository API) as in-process ONNX does, and refuses a plaintext client and one
  that does not trust its certificate, with an error, in seconds; HTTP stays plain, and `probe` reaches it through a
  TLS proxy. Under mutual TLS a client with a certificate from the CA is served, one without a certificate or with
  a stranger's is refused, and the launcher's stub watchdog (HTTP) still reloads a killed stub.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import signal
import ssl
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from ernie_deploy.cli import build_parser, main
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import DEMO_MODELS, SEQ_CLS
from ernie_deploy.core.tls import ServerTls, Tls
from ernie_deploy.deployfiles import kubernetes, manifests
from ernie_deploy.deployfiles.options import ManifestOptions
from ernie_deploy.deployfiles.pod import TLS_MOUNT, tls_secret_command
from ernie_deploy.server.args import GRPC_TLS_CA_ENV, GRPC_TLS_CERT_ENV, GRPC_TLS_KEY_ENV, grpc_tls_args
from ernie_deploy.server.binary import SYSTEM, TritonBinary
from ernie_deploy.server.process import TritonServer
from tests.conftest import artifacts

ROOT = Path(__file__).resolve().parents[1]
WRAPPER = ROOT / "docker" / "restrict-admin-apis.sh"
KEY = "k3y-for-tests_0123456789abcdef"
TEXTS = ["国足公布世预赛名单", "股市大涨", "abc 123 新闻"]


# -- certificates ---------------------------------------------------------------------------------------------


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _issue(subject: str, issuer: tuple | None, *, ca: bool = False, server: bool = False, client: bool = False):
    """A P-256 key and a certificate for `subject`, signed by `issuer` (cert, key), or self-signed."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    issuer_cert, issuer_key = issuer or (None, key)
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(issuer_cert.subject if issuer_cert else _name(subject))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    )
    if ca:
        usage = dict(key_cert_sign=True, crl_sign=True, digital_signature=False)
    else:
        usage = dict(key_cert_sign=False, crl_sign=False, digital_signature=True)
    builder = builder.add_extension(
        x509.KeyUsage(
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
            **usage,
        ),
        critical=True,
    )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    if client:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256()), key


def _write(folder: Path, name: str, cert, key) -> None:
    from cryptography.hazmat.primitives import serialization

    (folder / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{name}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (folder / f"{name}.key").chmod(0o600)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """ca.crt, server.crt/.key (127.0.0.1, localhost), client.crt/.key from that CA; other-ca.crt and stranger.crt/.key
    from another CA."""
    folder = tmp_path_factory.mktemp("pki")
    ca = _issue("ernie-deploy test CA", None, ca=True)
    _write(folder, "ca", *ca)
    _write(folder, "server", *_issue("localhost", ca, server=True))
    _write(folder, "client", *_issue("test client", ca, client=True))
    other = _issue("another CA", None, ca=True)
    _write(folder, "other-ca", *other)
    _write(folder, "stranger", *_issue("stranger", other, client=True))
    return folder


# -- the values and the options, refused by name -----------------------------------------------------------------


def test_tls_values_take_usable_files_only(pki, tmp_path):
    tls = Tls(pki / "ca.crt", pki / "client.crt", pki / "client.key")
    assert tls.mutual and "client certificate" in tls.describe()
    assert not Tls(pki / "ca.crt").mutual and Tls().ca is None  # None: the system's CAs
    with pytest.raises(ErnieDeployError, match="--tls-cert without --tls-key") as err:
        Tls(pki / "ca.crt", cert=pki / "client.crt")
    assert "pass both --tls-cert and --tls-key" in str(err.value)
    with pytest.raises(ErnieDeployError, match=f"--tls-ca {tmp_path / 'nope.crt'}: no such file"):
        Tls(tmp_path / "nope.crt")
    with pytest.raises(ErnieDeployError, match="cannot be used") as err:
        Tls(pki / "ca.crt", pki / "client.crt", pki / "server.key")  # another certificate's key
    assert "its own private key" in str(err.value)
    junk = tmp_path / "junk.crt"
    junk.write_text("not a certificate\n")
    with pytest.raises(ErnieDeployError, match="holds no usable CA certificate"):
        Tls(junk)
    assert ServerTls(pki / "server.crt", pki / "server.key", pki / "ca.crt").mutual
    with pytest.raises(ErnieDeployError, match="--grpc-tls-cert .* cannot be used"):
        ServerTls(pki / "server.crt", pki / "client.key")
    with pytest.raises(ErnieDeployError, match="--grpc-tls-ca .*: no such file"):
        ServerTls(pki / "server.crt", pki / "server.key", tmp_path / "nope.crt")


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--grpc-tls-key", "{pki}/server.key"], "--grpc-tls-key without --grpc-tls-cert"),
        (["--grpc-tls-cert", "{pki}/server.crt"], "--grpc-tls-cert without --grpc-tls-key"),
        (["--grpc-tls-ca", "{pki}/ca.crt"], "--grpc-tls-ca without --grpc-tls-cert"),
        (["--grpc-tls-cert", "{pki}/server.crt", "--grpc-tls-key", "{pki}/gone.key"], "--grpc-tls-key .*: no such"),
    ],
)
def test_serve_refuses_half_given_or_missing_tls_files_before_starting(pki, tmp_path, capsys, flags, message):
    import re

    argv = ["serve", "-r", str(tmp_path / "not-built-yet"), *(f.format(pki=pki) for f in flags)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "fix:" in err
    assert "admin key" not in err  # refused before anything else happened


def test_the_tools_refuse_tls_options_they_cannot_use(pki, tmp_path, capsys):
    from ernie_deploy.cli.bench import config_from_args
    from ernie_deploy.evaluate.served import main as client_main

    # A client script: a missing file is an error with the fix, exit 2, before any connection.
    assert client_main(SEQ_CLS, ["--tls-ca", str(tmp_path / "ca.crt"), "--text", "x"]) == 2
    assert "--tls-ca" in capsys.readouterr().err
    # probe and stats speak HTTP: TLS options only for an https:// URL (a proxy), never Triton's own port.
    assert main(["probe", "--http-url", "http://127.0.0.1:8000", "--tls-ca", str(pki / "ca.crt")]) == 2
    assert "Triton's own HTTP endpoint has no TLS" in capsys.readouterr().err
    # soak and bench start their own server: its TLS and their clients' go together.
    serve_only = ["--grpc-tls-cert", str(pki / "server.crt"), "--grpc-tls-key", str(pki / "server.key")]
    assert main(["soak", "-r", str(tmp_path), *serve_only]) == 2
    assert "no --tls-ca to trust the server's certificate" in capsys.readouterr().err
    with pytest.raises(ErnieDeployError, match="would serve plain gRPC"):
        config_from_args(build_parser().parse_args(["bench", "--load-generator", "python", "--tls"]))
    mutual = [*serve_only, "--grpc-tls-ca", str(pki / "ca.crt"), "--tls-ca", str(pki / "ca.crt")]
    with pytest.raises(ErnieDeployError, match="require client certificates"):
        config_from_args(build_parser().parse_args(["bench", "--load-generator", "python", *mutual]))
    both = [*mutual, "--tls-cert", str(pki / "client.crt"), "--tls-key", str(pki / "client.key")]
    config = config_from_args(build_parser().parse_args(["bench", "--load-generator", "python", *both]))
    assert config.grpc_tls.mutual and config.tls.mutual


# -- the flags: launcher, perf_analyzer, image, Kubernetes -------------------------------------------------------


def test_the_launcher_serves_grpc_over_tls_and_can_keep_http_local(pki, tmp_path):
    tls = ServerTls(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    server = TritonServer(tmp_path / "repo", host="0.0.0.0", http_host="127.0.0.1", grpc_tls=tls, admin_key=KEY)
    server.binary = TritonBinary(tmp_path / "bin" / "tritonserver", tmp_path / "backends", SYSTEM)
    argv = server.command()
    assert argv[-len(grpc_tls_args(tls.cert, tls.key, tls.ca)) :] == grpc_tls_args(tls.cert, tls.key, tls.ca)
    assert grpc_tls_args("c", "k", "a") == [
        "--grpc-use-ssl=true",
        "--grpc-server-cert=c",
        "--grpc-server-key=k",
        "--grpc-use-ssl-mutual=true",
        "--grpc-root-cert=a",
    ]
    assert "--grpc-address=0.0.0.0" in argv
    assert "--http-address=127.0.0.1" in argv and "--metrics-address=127.0.0.1" in argv
    assert server.http_url.startswith("http://127.0.0.1:")
    plain = TritonServer(tmp_path / "repo")
    plain.binary = server.binary
    assert not any("ssl" in a for a in plain.command())


def test_perf_analyzer_runs_over_tls_with_the_same_files(pki, tmp_path):
    from ernie_deploy.bench.perf_analyzer import perf_analyzer_command

    def command(tls):
        return perf_analyzer_command("pa", "m", "127.0.0.1:8001", tmp_path / "in.json", tmp_path / "o.csv", 4, tls=tls)

    assert not any(a.startswith("--ssl") for a in command(None))
    argv = command(Tls(pki / "ca.crt", pki / "client.crt", pki / "client.key"))
    assert argv[argv.index("--ssl-grpc-use-ssl") :] == [
        "--ssl-grpc-use-ssl",  # perf_analyzer's flag takes no value
        f"--ssl-grpc-root-certifications-file={pki / 'ca.crt'}",
        f"--ssl-grpc-private-key-file={pki / 'client.key'}",
        f"--ssl-grpc-certificate-chain-file={pki / 'client.crt'}",
    ]
    assert command(Tls())[-1] == "--ssl-grpc-use-ssl"  # the system's CAs


def _wrapper(env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ERNIE_DEPLOY_")}
    argv = ["/bin/sh", str(WRAPPER), "printf", "%s\\n", "tritonserver"]
    return subprocess.run(argv, env={**clean, "ERNIE_DEPLOY_ADMIN_KEY": KEY, **env}, capture_output=True, text=True)


def test_the_images_wrapper_adds_the_same_tls_flags_from_the_environment(pki):
    files = {GRPC_TLS_CERT_ENV: pki / "server.crt", GRPC_TLS_KEY_ENV: pki / "server.key"}
    for env, want in (
        (files, grpc_tls_args(pki / "server.crt", pki / "server.key")),
        (
            {**files, GRPC_TLS_CA_ENV: pki / "ca.crt"},
            grpc_tls_args(pki / "server.crt", pki / "server.key", pki / "ca.crt"),
        ),
    ):
        done = _wrapper({k: str(v) for k, v in env.items()})
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[1 : 1 + len(want)] == want
    assert "ssl" not in _wrapper({}).stdout  # no TLS variables: the plain command line
    for env, message in (
        (
            {GRPC_TLS_CERT_ENV: str(pki / "server.crt")},
            "needs ERNIE_DEPLOY_GRPC_TLS_CERT and ERNIE_DEPLOY_GRPC_TLS_KEY",
        ),
        ({GRPC_TLS_CERT_ENV: str(pki / "server.crt"), GRPC_TLS_KEY_ENV: "/nonexistent/tls.key"}, "cannot be read"),
    ):
        done = _wrapper(env)
        assert done.returncode == 2 and "tritonserver" not in done.stdout
        assert message in done.stderr and "fix:" in done.stderr


def test_the_deployment_mounts_the_tls_secret_and_keeps_its_http_probes():
    plain = kubernetes.manifests(ROOT / "models")["deployment.yaml"]
    for mutual in (False, True):
        options = ManifestOptions(grpc_tls=True, grpc_tls_mutual=mutual, gateway=False)
        deployment = kubernetes.manifests(ROOT / "models", options)["deployment.yaml"]
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        was = plain["spec"]["template"]["spec"]["containers"][0]
        # The image's command line and the probes are the plain Deployment's: the wrapper adds the flags.
        assert container["args"] == was["args"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe] == was[probe]
        env = {e["name"]: e["value"] for e in container["env"]}
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == TLS_MOUNT]
        assert mount["readOnly"] is True
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == "ernie-deploy-grpc-tls"
        assert env[GRPC_TLS_CERT_ENV] == f"{TLS_MOUNT}/tls.crt"
        assert env[GRPC_TLS_KEY_ENV] == f"{TLS_MOUNT}/tls.key"
        assert (env.get(GRPC_TLS_CA_ENV) == f"{TLS_MOUNT}/ca.crt") is mutual
        header = manifests.render(ROOT / "models", options)["deployment.yaml"]
        assert tls_secret_command(mutual=mutual) in header
        assert ("--from-file=ca.crt=ca.crt" in header) is mutual


# -- a real server over TLS ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_repo(tiny_pipeline, tmp_path_factory) -> Path:
    from ernie_deploy.repository.build import BuildOptions, build

    repo = tmp_path_factory.mktemp("tls_models")
    p = tiny_pipeline
    build(
        [artifacts(p)],
        repo,
        BuildOptions(runtime="python", layout="ensemble"),
    )
    return repo


@pytest.fixture(scope="module")
def expected(tiny_pipeline) -> list:
    from ernie_deploy.evaluate.inputs import ModelInputs, reference_predictions

    return reference_predictions(
        ModelInputs(tiny_pipeline.static.spec, tiny_pipeline.onnx, tiny_pipeline.static, TEXTS), TEXTS
    )


def _serve(repo: Path, tls: ServerTls, log: Path, **kw):
    server = TritonServer(repo, http_port=0, grpc_port=0, metrics_port=0, grpc_tls=tls, log_file=log, **kw)
    server.start(timeout=180)
    return server


@pytest.fixture(scope="module")
def tls_server(tiny_repo, pki):
    server = _serve(tiny_repo, ServerTls(pki / "server.crt", pki / "server.key"), tiny_repo.parent / "tls.log")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def mtls_server(tiny_repo, pki):
    tls = ServerTls(pki / "server.crt", pki / "server.key", pki / "ca.crt")
    # With the admin key too: the watchdog's reload is a restricted call, sent over HTTP with the key's header.
    server = _serve(tiny_repo, tls, tiny_repo.parent / "mtls.log", admin_key=KEY)
    yield server
    server.stop()


def _predict(url: str, tls: Tls | None, timeout_s: float = 10.0) -> list:
    from ernie_deploy.client.grpc_client import NO_RETRY, Client

    with Client(SEQ_CLS, url, tls=tls, timeout_s=timeout_s, retry=NO_RETRY) as client:
        client.check_ready()
        return client.predict(TEXTS, progress=False)


def _refused(url: str, tls: Tls | None) -> str:
    """The error a client gets, and that it comes in seconds, not after a hang."""
    t0 = time.monotonic()
    with pytest.raises(ErnieDeployError) as err:
        _predict(url, tls, timeout_s=10)
    assert time.monotonic() - t0 < 10
    return str(err.value)


@pytest.mark.integration
def test_a_tls_client_is_served_as_in_process_onnx_answers(tls_server, pki, expected):
    assert "--grpc-use-ssl=true" in tls_server.log_text().splitlines()[0]
    assert _predict(tls_server.grpc_url, Tls(pki / "ca.crt")) == expected
    # No client certificate needed without mutual TLS; one given does no harm.
    assert _predict(tls_server.grpc_url, Tls(pki / "ca.crt", pki / "client.crt", pki / "client.key")) == expected


@pytest.mark.integration
def test_the_tools_connect_over_tls(tls_server, pki, expected, capsys):
    from ernie_deploy.bench.load import prepare_requests, run_load
    from ernie_deploy.client.admin import RepositoryAdmin
    from ernie_deploy.evaluate.served import main as client_main

    url, ca = tls_server.grpc_url, str(pki / "ca.crt")
    # The client script (clients/seq_cls_grpc_client.py runs this main).
    assert client_main(SEQ_CLS, ["--grpc-url", url, "--tls-ca", ca, "--text", TEXTS[0]]) == 0
    assert capsys.readouterr().out.split("\t")[0] == expected[0]
    # The bench's asyncio load generator, over one TLS channel.
    model = ModelSpec.new(SEQ_CLS)
    result = run_load(url, model, prepare_requests(SEQ_CLS, TEXTS, 1), 2, warmup_s=0, count=6, tls=Tls(ca))
    assert result.errors == 0 and result.sequences == 6, result.error_messages
    # The repository API (rollout's) over TLS.
    with RepositoryAdmin(url, tls=Tls(ca)) as admin:
        assert {m["name"] for m in admin.index(ready=True)} >= {DEMO_MODELS[SEQ_CLS.name]}


@pytest.mark.integration
def test_a_plaintext_client_or_one_that_does_not_trust_the_server_is_refused(tls_server, pki):
    message = _refused(tls_server.grpc_url, None)
    assert f"no Triton server answers at {tls_server.grpc_url}" in message
    assert "--tls-ca" in message  # the fix names the option
    message = _refused(tls_server.grpc_url, Tls(pki / "other-ca.crt"))
    assert "over TLS (CA" in message and "other-ca.crt" in message


@pytest.mark.integration
def test_http_stays_plain_and_probe_reaches_it_through_a_tls_proxy(tls_server, pki, capsys):
    """Triton's HTTP has no TLS: health, statistics and `probe` answer plain HTTP beside encrypted gRPC; with a TLS
    proxy in front (here a tiny one; nginx, an ingress in a cluster), `probe --http-url https://... --tls-ca` goes
    through it."""
    assert main(["probe", "--http-url", tls_server.http_url]) == 0
    with _TlsProxy(pki / "server.crt", pki / "server.key", tls_server.ports["http"]) as port:
        url = f"https://127.0.0.1:{port}"
        assert main(["probe", "--http-url", url, "--tls-ca", str(pki / "ca.crt")]) == 0
        assert capsys.readouterr().out.startswith(f"ok {DEMO_MODELS[SEQ_CLS.name]}")
        assert main(["probe", "--http-url", url, "--tls-ca", str(pki / "other-ca.crt")]) == 2  # not trusted
        assert "CERTIFICATE_VERIFY_FAILED" in capsys.readouterr().err


@pytest.mark.integration
def test_mutual_tls_serves_only_clients_with_a_certificate_from_its_ca(mtls_server, pki, expected):
    ca = pki / "ca.crt"
    assert "--grpc-use-ssl-mutual=true" in mtls_server.log_text().splitlines()[0]
    assert _predict(mtls_server.grpc_url, Tls(ca, pki / "client.crt", pki / "client.key")) == expected
    assert "no Triton server answers" in _refused(mtls_server.grpc_url, Tls(ca))
    assert "no Triton server answers" in _refused(
        mtls_server.grpc_url, Tls(ca, pki / "stranger.crt", pki / "stranger.key")
    )
    assert "no Triton server answers" in _refused(mtls_server.grpc_url, None)


@pytest.mark.integration
def test_under_mutual_tls_the_launcher_still_reloads_a_killed_stub(mtls_server):
    """The launcher holds no client certificate: its readiness check and stub watchdog use the HTTP endpoint (the
    reload a restricted call, with the admin key's header)."""
    from ernie_deploy.server.watchdog import stub_processes

    watchdog, before = mtls_server.watchdog, len(mtls_server.watchdog.restarts)
    deadline = time.monotonic() + 30
    while Counter(stub_processes(mtls_server.pid).values()) != watchdog._expected and time.monotonic() < deadline:
        time.sleep(0.2)
    step = f"{DEMO_MODELS[SEQ_CLS.name]}_postprocess"
    pids = [p for p, model in stub_processes(mtls_server.pid).items() if model == step]
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while len(watchdog.restarts) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    (event,) = watchdog.restarts[before:]
    assert event.ok, event.message


class _TlsProxy:
    """A TLS-terminating proxy on a free loopback port to 127.0.0.1:`upstream` (what nginx or an ingress does in
    front of Triton's HTTP port), in a thread of its own."""

    def __init__(self, cert: Path, key: Path, upstream: int):
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.upstream = upstream
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()

    async def _pipe(self, reader, writer) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def _serve(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))

    async def _shutdown(self) -> None:
        self.server.close()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.loop.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        # A client refusing the proxy's certificate fails the handshake: expected here, not worth a logged traceback.
        self.loop.set_exception_handler(lambda loop, context: None)
        self.server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context))
        self.port = self.server.sockets[0].getsockname()[1]
        self.started.set()
        self.loop.run_forever()
        self.loop.close()

    def __enter__(self) -> int:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.started.wait(10)
        return self.port

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop)
        self.thread.join(10)
