"""How the gateway's app is served: uvicorn, one worker, in the foreground (`ernie-deploy gateway`), over HTTP or
its own HTTPS (Https: the certificate, key and, for mutual TLS, the CA, checked when made)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.gateway.app import Gateway, GatewaySettings
from ernie_deploy.gateway.defaults import DEFAULT_PORT


@dataclass(frozen=True)
class Https:
    """The gateway's own HTTPS: its certificate and key, and with `ca` only clients presenting a certificate signed
    by that CA are served (mutual TLS)."""

    cert: Path
    key: Path
    ca: Path | None = None

    def __post_init__(self) -> None:
        import ssl

        for option, path in (("--http-tls-cert", self.cert), ("--http-tls-key", self.key), ("--http-tls-ca", self.ca)):
            if path is not None and not Path(path).is_file():
                raise BadOptionsError(f"{option} {path}: no such file", "pass the path of an existing PEM file")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(str(self.cert), str(self.key), password=lambda: b"")
            if self.ca is not None:
                context.load_verify_locations(cafile=str(self.ca))
        except ssl.SSLError as exc:
            raise BadOptionsError(
                f"--http-tls-cert {self.cert}, --http-tls-key {self.key}"
                + (f", --http-tls-ca {self.ca}" if self.ca else "")
                + f" cannot be used: {exc.reason or exc}",
                "pass the gateway's PEM certificate, its own unencrypted key, and a PEM CA certificate",
            ) from None

    def uvicorn(self) -> dict:
        import ssl

        out = {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}
        if self.ca is not None:
            out |= {"ssl_ca_certs": str(self.ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
        return out


def serve(
    settings: GatewaySettings,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    https: Https | None = None,
    log_level: str = "info",
) -> None:
    """Serve the gateway in the foreground (uvicorn, one worker) until SIGTERM or Ctrl-C, which finish the requests
    in flight and close the Triton connection."""
    import uvicorn

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    gateway = Gateway(settings)
    scheme = "https" if https else "http"
    shown = f"[{host}]" if ":" in host else host
    print(
        f"ernie-deploy gateway: {len(gateway.models.models)} models of {settings.repository} "
        f"({', '.join(gateway.models.models) or 'none yet'}) at {scheme}://{shown}:{port}, readiness "
        f"{scheme}://{shown}:{port}/ready, Triton gRPC at {settings.grpc_url}",
        flush=True,
    )
    config = uvicorn.Config(
        gateway.app(),
        host=host,
        port=port,
        workers=1,
        log_level=log_level,
        access_log=False,  # a line per request costs what the gateway is measured by; /metrics counts them
        lifespan="on",
        timeout_graceful_shutdown=30,
        **(https.uvicorn() if https else {}),
    )
    uvicorn.Server(config).run()
