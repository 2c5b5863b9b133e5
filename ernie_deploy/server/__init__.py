"""The tritonserver process: finding the binary, preflight (shared memory, ports), its lifecycle and logs, the
stub watchdog, the liveness probe, the Kubernetes and KServe manifests and the Grafana dashboard over its metrics.

Imports: ernie_deploy.core.
"""
