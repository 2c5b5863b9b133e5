"""What runs inside Triton's python backend: the tokenizer, the model and postprocess steps, the backend adapter.

Imports: numpy, tokenizers, onnxruntime and ernie_deploy.core, nothing else (tests/test_layers.py checks it),
so a Triton container needs no paddle, grpc or scikit-learn to serve.
"""
