"""TLS on the wire: the certificate files a client connects with (`Tls`) and a server serves gRPC with
(`ServerTls`), checked when they are made, and the command-line options every tool shares for them.

Triton encrypts gRPC only; its HTTP endpoint (health, metrics, statistics, the admin key's HTTP side) has no TLS.
A tool that speaks HTTP takes the same client options for an https:// URL: a TLS-terminating proxy in front of
that port (docs/SECURITY.md, "Encrypted gRPC (TLS)").

Files are PEM, keys unencrypted (neither gRPC nor tritonserver takes a passphrase). The files are loaded here with
the standard library's ssl module, so a missing file, a key that is not the certificate's, or something that is not
PEM at all fails before any connection or server start, naming the option. Standard library only.
"""

from __future__ import annotations

import argparse
import functools
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError

PEM_HINT = "PEM files; a key without a passphrase"


def _file(path: str | os.PathLike | None, option: str) -> Path | None:
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise BadOptionsError(f"{option} {path}: no such file", f"pass the path of an existing file ({PEM_HINT})")
    if not os.access(path, os.R_OK):
        raise BadOptionsError(f"{option} {path}: cannot be read", "make it readable by this user")
    return path


def _no_passphrase() -> bytes:
    return b""  # never OpenSSL's terminal prompt: an encrypted key fails like any unusable one


def _load(what: str, load, fix: str) -> None:
    try:
        load()
    except ssl.SSLError as exc:
        raise BadOptionsError(f"{what}: {exc.reason or exc}", fix) from None


@dataclass(frozen=True)
class Tls:
    """How a client connects over TLS: `ca`, the CA certificate that signed the server's certificate (None: the
    system's trusted CAs), and under mutual TLS `cert` and `key`, the client's own certificate and its key."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None

    def __post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            given, missing = ("--tls-cert", "--tls-key") if self.key is None else ("--tls-key", "--tls-cert")
            raise BadOptionsError(
                f"{given} without {missing}: a client certificate goes with its private key",
                f"pass both {given} and {missing}, or neither",
            )
        for name, option in (("ca", "--tls-ca"), ("cert", "--tls-cert"), ("key", "--tls-key")):
            object.__setattr__(self, name, _file(getattr(self, name), option))
        self.ssl_context()  # every file parsed, the key matched to its certificate

    @property
    def mutual(self) -> bool:
        return self.cert is not None

    def describe(self) -> str:
        trust = f"CA {self.ca}" if self.ca else "the system's CAs"
        return f"TLS ({trust}" + (f", client certificate {self.cert})" if self.cert else ")")

    def ssl_context(self) -> ssl.SSLContext:
        """A client context for an https:// URL (a TLS proxy in front of Triton's HTTP port)."""
        return _client_context(self)


@functools.lru_cache(maxsize=8)
def _client_context(tls: Tls) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if tls.ca is not None:  # that CA alone, as gRPC trusts it: not the system's besides
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname checked, certificate required
        _load(
            f"--tls-ca {tls.ca} holds no usable CA certificate",
            lambda: context.load_verify_locations(cafile=str(tls.ca)),
            "pass the PEM certificate of the CA that signed the server's certificate",
        )
    if tls.cert is not None:
        _load(
            f"--tls-cert {tls.cert} with --tls-key {tls.key} cannot be used",
            lambda: context.load_cert_chain(str(tls.cert), str(tls.key), password=_no_passphrase),
            f"pass the client's certificate and its own private key ({PEM_HINT})",
        )
    return context


@dataclass(frozen=True)
class ServerTls:
    """How a server serves gRPC over TLS: its certificate and key, and with `ca` mutual TLS: only clients that
    present a certificate signed by that CA are served."""

    cert: Path
    key: Path
    ca: Path | None = None

    def __post_init__(self) -> None:
        if self.cert is None or self.key is None:
            raise BadOptionsError(
                "serving TLS needs the server's certificate and its private key",
                "pass --grpc-tls-cert and --grpc-tls-key",
            )
        for name, option in (("cert", "--grpc-tls-cert"), ("key", "--grpc-tls-key"), ("ca", "--grpc-tls-ca")):
            object.__setattr__(self, name, _file(getattr(self, name), option))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _load(
            f"--grpc-tls-cert {self.cert} with --grpc-tls-key {self.key} cannot be used",
            lambda: context.load_cert_chain(str(self.cert), str(self.key), password=_no_passphrase),
            f"pass the server's certificate and its own private key ({PEM_HINT})",
        )
        if self.ca is not None:
            _load(
                f"--grpc-tls-ca {self.ca} holds no usable CA certificate",
                lambda: context.load_verify_locations(cafile=str(self.ca)),
                "pass the PEM certificate of the CA that signs the clients' certificates",
            )

    @property
    def mutual(self) -> bool:
        return self.ca is not None

    def describe(self) -> str:
        return "mutual TLS: clients need a certificate" if self.mutual else "TLS"


# -- the command-line options -----------------------------------------------------------------------------------


def add_tls_arguments(parser: argparse.ArgumentParser, *, http: bool = False) -> None:
    """--tls, --tls-ca, --tls-cert, --tls-key: how this tool connects to a server whose gRPC endpoint (or, with
    http=True, whose HTTP endpoint behind a TLS proxy: an https:// --http-url) is encrypted."""
    where = "a server's gRPC endpoint"
    if http:
        where = "an https:// --http-url (a TLS proxy in front of Triton's HTTP port)"
    group = parser.add_argument_group("TLS", f"connect to {where} over TLS ({PEM_HINT})")
    if not http:
        group.add_argument(
            "--tls",
            action="store_true",
            help="connect over TLS, trusting the system's CAs unless --tls-ca (the options below imply it)",
        )
    group.add_argument(
        "--tls-ca", metavar="FILE", help="CA certificate that signed the server's (default: the system's CAs)"
    )
    group.add_argument("--tls-cert", metavar="FILE", help="client certificate, for a server that requires one")
    group.add_argument("--tls-key", metavar="FILE", help="the client certificate's private key")


def tls_from_args(args: argparse.Namespace) -> Tls | None:
    """The client TLS the options ask for; None for a plain connection."""
    files = (args.tls_ca, args.tls_cert, args.tls_key)
    if not getattr(args, "tls", False) and not any(files):
        return None
    return Tls(*files)


def https_tls(url: str, args: argparse.Namespace) -> Tls | None:
    """The client TLS for an HTTP tool's --http-url: only an https:// URL (a TLS proxy) takes TLS options."""
    tls = tls_from_args(args)
    if tls is not None and not url.startswith("https://"):
        raise BadOptionsError(
            f"--tls-ca, --tls-cert and --tls-key are for an https:// URL, and --http-url is {url}: Triton's own HTTP "
            "endpoint has no TLS",
            "point --http-url at the TLS proxy in front of the HTTP port (https://HOST:PORT), or drop the TLS options",
        )
    return tls


def add_server_tls_arguments(parser: argparse.ArgumentParser) -> None:
    """--grpc-tls-cert, --grpc-tls-key, --grpc-tls-ca: serve gRPC over TLS, with --grpc-tls-ca mutual TLS."""
    group = parser.add_argument_group(
        "gRPC TLS", f"serve gRPC over TLS ({PEM_HINT}); HTTP and metrics stay plain (Triton has no TLS for them)"
    )
    group.add_argument("--grpc-tls-cert", metavar="FILE", help="the server's certificate (and chain)")
    group.add_argument("--grpc-tls-key", metavar="FILE", help="the server certificate's private key")
    group.add_argument(
        "--grpc-tls-ca",
        metavar="FILE",
        help="mutual TLS: serve only clients presenting a certificate signed by this CA",
    )


def server_tls_from_args(args: argparse.Namespace) -> ServerTls | None:
    cert, key, ca = args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_ca
    if not (cert or key or ca):
        return None
    if not (cert and key):
        given = ", ".join(
            o for o, v in (("--grpc-tls-cert", cert), ("--grpc-tls-key", key), ("--grpc-tls-ca", ca)) if v
        )
        raise BadOptionsError(
            f"{given} without {'--grpc-tls-key' if cert else '--grpc-tls-cert'}: TLS needs the server's certificate "
            "and its private key",
            "pass both --grpc-tls-cert and --grpc-tls-key (and --grpc-tls-ca for mutual TLS)",
        )
    return ServerTls(Path(cert), Path(key), Path(ca) if ca else None)


def self_served_tls(args: argparse.Namespace, tool: str) -> tuple[ServerTls | None, Tls | None]:
    """For a tool that starts its own server and talks to it (soak, bench): the server's TLS and its clients', both
    or neither."""
    server, client = server_tls_from_args(args), tls_from_args(args)
    if server is not None and client is None:
        raise BadOptionsError(
            f"{tool} would serve gRPC over TLS, but its own clients have no --tls-ca to trust the server's certificate",
            "add --tls-ca (the CA that signed --grpc-tls-cert), and with --grpc-tls-ca also --tls-cert and --tls-key",
        )
    if client is not None and server is None:
        raise BadOptionsError(
            f"--tls options given, but the server {tool} starts would serve plain gRPC",
            "add --grpc-tls-cert and --grpc-tls-key (and --grpc-tls-ca for mutual TLS), or drop the --tls options",
        )
    if server is not None and server.mutual and not client.mutual:
        raise BadOptionsError(
            f"--grpc-tls-ca makes {tool}'s server require client certificates, and its clients have none",
            "add --tls-cert and --tls-key (a client certificate signed by --grpc-tls-ca)",
        )
    return server, client
