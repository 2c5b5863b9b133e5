"""ernie-deploy: PaddlePaddle ERNIE models to NVIDIA Triton Inference Server.

Data flows one way: checkpoint -> static model -> ONNX -> repository -> server -> client -> report.
Importing this package must stay cheap and paddle-free: Triton's python models import it.
"""

__version__ = "0.1.0"
