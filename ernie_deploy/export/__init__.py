"""Checkpoint -> Paddle static model -> ONNX: export, paddle2onnx conversion, the parity gate, INT8 and FP16.

Imports: ernie_deploy.core, serving and fetch; paddle lazily.
"""
