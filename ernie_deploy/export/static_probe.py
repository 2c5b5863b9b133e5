"""What a static model answers, read from one run of Paddle Inference on a two-token input: the shape a static
program declares is not read back the same way by every Paddle format, a run's output is."""

from __future__ import annotations

from pathlib import Path

from ernie_deploy.core.tasks import MODEL_INPUTS


def static_output_shape(model_file: str | Path, params_file: str | Path) -> tuple[int, ...]:
    """The shape of the static model's first output for one text of two tokens ([1, ...])."""
    import numpy as np
    from paddle import inference

    config = inference.Config(str(model_file), str(params_file))
    config.disable_gpu()
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    ids = np.array([[1, 2]], dtype=np.int64)  # [CLS] [SEP] in an ERNIE vocabulary; any id below its size will do
    for name in predictor.get_input_names():
        handle = predictor.get_input_handle(name)
        handle.reshape(ids.shape)
        handle.copy_from_cpu(ids if name == MODEL_INPUTS[0] else np.zeros_like(ids))
    predictor.run()
    return tuple(predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu().shape)


def static_logits_rank(model_file: str | Path, params_file: str | Path) -> int:
    """The dims of a static model's logits per text (1: a label per text, 2: a label per token)."""
    return len(static_output_shape(model_file, params_file)) - 1
