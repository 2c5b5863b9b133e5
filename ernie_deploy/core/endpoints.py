"""Where a server listens unless told otherwise: Triton's own default ports, on the loopback interface only."""

from __future__ import annotations

LOOPBACK = "127.0.0.1"
# Triton's defaults; the launcher, the image, the Kubernetes manifests, the probe and the clients all use them.
PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
DEFAULT_HTTP_URL = f"http://{LOOPBACK}:{PORTS['http']}"
DEFAULT_GRPC_URL = f"{LOOPBACK}:{PORTS['grpc']}"
DEFAULT_METRICS_URL = f"http://{LOOPBACK}:{PORTS['metrics']}/metrics"
