"""The Triton model repository: configs derived from the ONNX signature (tritonclient's ModelConfig), the
atomic build, and the linter.

Imports: ernie_deploy.core, serving and export.
"""
