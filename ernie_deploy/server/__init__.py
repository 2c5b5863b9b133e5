"""The tritonserver process: finding the binary, preflight (shared memory, ports), its lifecycle and logs, the
stub watchdog, the liveness probe and the Kubernetes manifests.

Imports: ernie_deploy.core.
"""
