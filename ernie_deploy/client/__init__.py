"""The gRPC client users call: retries, per-text errors, decoding the ensemble's outputs.

Imports: ernie_deploy.core and serving.
"""
