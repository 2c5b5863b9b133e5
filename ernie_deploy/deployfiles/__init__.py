"""The files that deploy a model repository elsewhere, each generated from the repository or from the server's own
facts, never written by hand: the Kubernetes Deployment, Service and autoscaler, the KServe InferenceService, and
the Grafana dashboard over the server's metrics. The committed deploy/k8s/, deploy/kserve/ and deploy/grafana/ are
their output (deploy/prometheus/, scrape configs and alert rules, is written by hand and tested with promtool).

Imports: ernie_deploy.core, and ernie_deploy.server for the command line and the shared-memory sizes the server
itself uses.
"""
