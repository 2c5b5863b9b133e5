"""The peer's server side: PaddleNLP's SimpleServing (`paddlenlp.server.SimpleServer`, FastAPI under uvicorn,
Paddle Inference) serving an exported static model, as a Paddle user would run it. `benchmarks.peer.server`
starts this as its own process:

    python -m benchmarks.peer.app --model artifacts/static/seq_cls --route models/ernie_seqcls --kind sequence \
        --port 8189

What is PaddleNLP's own and left as it ships: the app (SimpleServer), its router and request model, the
ModelManager (one predictor behind a lock), the task's model and post handlers (for a label per text:
CustomModelHandler, then MultiClassificationPostHandler), its Python tokenizer (AutoTokenizer on the model folder)
and its uvicorn launcher (paddlenlp.cli.server.start_backend).

What is adapted, and only that (StaticModelPredictor, installed as the Predictor that ModelManager builds):
- finding the model: paddlenlp 2.8.1 looks only for `*.pdmodel`, while Paddle 3's `paddle.jit.save` writes a PIR
  program `inference.json`; a model folder without a `.pdmodel` is served from its `<prefix>.json`;
- its INT8 check reads PIR op names (`op.name()`; a PIR op has no `op.type`, the attribute paddlenlp reads);
- Paddle Inference's Config is given the `.json` file, and without `enable_memory_optim()`: on paddlepaddle 3.3.1
  that option makes `create_predictor` fail on a PIR program ("Not find predictor_id N and pass_name
  memory_optimize_pass", reproduced with a bare Config here). Every other Config setting (MKLDNN, no feed/fetch
  ops, ceil(cores / 2) math threads, the deleted fuse pass) is PaddleNLP's.

Logging is turned down (PaddleNLP's per-request "predictor id" INFO line, uvicorn's access log) because Triton logs
nothing per request either: the peer is measured at its best, not slowed by writing a line per request.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

# The PaddleNLP handlers (names in paddlenlp.server.handlers) that serve each task kind (a name in ernie_deploy.kinds):
# model handler, post handler. A kind without them gets no peer row: a token model's handler (TokenClsModelHandler)
# returns raw logits with no post handler to turn them into entities, so its answers could not be compared with ours.
HANDLERS = {"sequence": ("CustomModelHandler", "MultiClassificationPostHandler")}


@contextlib.contextmanager
def _pir_config():
    """paddle.inference.Config, for the duration, as a subclass that takes `<prefix>.pdmodel` to mean
    `<prefix>.json` when only the PIR file exists, and skips enable_memory_optim (see the module docstring)."""
    import paddle

    original = paddle.inference.Config

    class PirConfig(original):
        def __init__(self, model_file, params_file):
            model = Path(model_file)
            if model.suffix == ".pdmodel" and not model.exists() and model.with_suffix(".json").exists():
                model = model.with_suffix(".json")
            super().__init__(str(model), params_file)

        def enable_memory_optim(self, *args, **kwargs):
            pass

    paddle.inference.Config = PirConfig
    try:
        yield
    finally:
        paddle.inference.Config = original


def _predictor_class():
    from paddlenlp.server.predictor import Predictor

    class StaticModelPredictor(Predictor):
        """PaddleNLP's Predictor, able to open a Paddle 3 PIR export (see the module docstring)."""

        def _get_default_static_model_path(self):
            found = super()._get_default_static_model_path()
            if found is not None:
                return found
            for program in sorted(Path(self._model_path).glob("*.json")):
                if program.with_suffix(".pdiparams").exists():
                    return str(program.with_suffix(""))
            return None

        def _is_int8_model(self, model_path):
            import paddle

            program = paddle.jit.load(model_path).program()
            return any("quantize" in op.name() for block in program.blocks for op in block.ops)

        def _prepare_paddle_mode(self, static_model_path):
            with _pir_config():
                super()._prepare_paddle_mode(static_model_path)

    return StaticModelPredictor


def tokenizer_folder(model: Path) -> str:
    """What ModelManager's AutoTokenizer.from_pretrained should open: the export folder when its
    tokenizer_config.json names the tokenizer class (exports of PaddleNLP checkpoints do), else a folder saved here
    by PaddleNLP's ErnieTokenizer from the export's vocab.txt and casing, as a Paddle user would save it."""
    import json
    import tempfile

    config_file = model / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.exists() else {}
    if config.get("tokenizer_class"):
        return str(model)
    from paddlenlp.transformers import ErnieTokenizer

    saved = tempfile.mkdtemp(prefix="ernie-deploy-peer-tokenizer-")
    tokenizer = ErnieTokenizer(str(model / "vocab.txt"), do_lower_case=config.get("do_lower_case", True))
    tokenizer.save_pretrained(saved)
    return saved


def build_app(model: Path, route: str, kind: str):
    """A SimpleServer with the static model in `model` registered at POST /<route>, its handlers by task kind."""
    from paddlenlp.server import SimpleServer, handlers, model_manager

    if kind not in HANDLERS:
        raise SystemExit(f"PaddleNLP SimpleServing has no handlers here for a {kind!r} model")
    model_handler, post_handler = (getattr(handlers, name) for name in HANDLERS[kind])
    model_manager.Predictor = _predictor_class()  # the only change to its serving path: how the model is opened
    app = SimpleServer()
    app.register(
        route,
        model_path=str(model),
        tokenizer_name=tokenizer_folder(model),
        model_handler=model_handler,
        post_handler=post_handler,
        device_id=-1,  # CPU
    )
    return app


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--model", required=True, help="an exported static model folder (ernie-deploy export)")
    parser.add_argument("--route", required=True, help="the path answered with POST, e.g. models/ernie_seqcls")
    parser.add_argument("--kind", required=True, help="the task kind (a name in ernie_deploy.kinds)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)

    from paddlenlp.cli.server import start_backend
    from paddlenlp.utils.log import logger

    logger.set_level("WARNING")
    app = build_app(Path(args.model), args.route, args.kind)
    start_backend(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
