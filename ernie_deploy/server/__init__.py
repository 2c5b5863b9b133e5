"""The tritonserver process: finding the binary, preflight (shared memory, ports), its lifecycle and logs, the
stub watchdog, serving a repository with the admin key its addresses need, the environment's `tritonserver`
launcher, the liveness probe, and what a running server serves and its statistics.

Imports: ernie_deploy.core.
"""
