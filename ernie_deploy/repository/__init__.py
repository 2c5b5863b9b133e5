"""The Triton model repository: the ONNX signature (signature), configs derived from it as tritonclient's
ModelConfig (configs), the atomic build (build, options), and the linter (check).

Imports: ernie_deploy.core, serving and export.
"""
