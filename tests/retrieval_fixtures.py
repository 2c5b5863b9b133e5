"""Retrieval checkpoints made by paddlenlp itself, random weights from a fixed seed, in every form the embed and
rerank kinds read, and the Paddle reference each form's own code gives (paddlenlp's ErnieDualEncoder and
ErnieCrossEncoder, the neural-search recipe's pooling): what the parity tests compare the served answers with.

    make_checkpoint(form, out, shape="tiny")   # a checkpoint folder of `form` (FORMS)
    reference(form, root, texts, pairs=None)    # Paddle's answers for it, float32 [n, dim] or [n]
    build_retrieval_repository(work)            # a repository serving SERVED's models; returns it

conftest.py's session fixture `retrieval_server` serves that repository on a real tritonserver (free ports).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np

from ernie_deploy.fetch.shapes import filled_vocab, get_shape, shape_config

ROOT = Path(__file__).resolve().parents[1]
SEED = 21
# The forms: (task, what it is)
FORMS = {
    "rocketqa_tower": ("embed", "one tower of RocketQA's ErnieDualEncoder: an ErnieEncoder with emb_reduce_linear"),
    "rocketqa_tower_plain": ("embed", "an ErnieEncoder tower without a projection"),
    "recipe": ("embed", "the neural-search recipe's SemanticIndexBase state: ptm.* and emb_reduce_linear.*"),
    "ernie_model": ("embed", "a plain ErnieModel"),
    "cross_encoder": ("rerank", "RocketQA's cross-encoder: an ErnieEncoder with a 2-label classifier"),
    "seq_cls_2": ("rerank", "an ErnieForSequenceClassification of 2 labels"),
    "seq_cls_1": ("rerank", "an ErnieForSequenceClassification of 1 label"),
}
PROJECTION = 48


def _vocab() -> list[str]:
    lines = (ROOT / "demo" / "seq_cls" / "vocab.txt").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line]


def _config(shape: str, **extra):
    from paddlenlp.transformers import ErnieConfig

    return ErnieConfig(**shape_config(get_shape(shape)), **extra)


def _finish(out: Path, config) -> None:
    from paddlenlp.transformers import ErnieTokenizer

    (out / "vocab.txt").write_text("\n".join(filled_vocab(_vocab(), config.vocab_size)) + "\n", "utf-8")
    ErnieTokenizer(str(out / "vocab.txt")).save_pretrained(str(out))


def _scaled(model) -> None:
    """Weights spread wider than their initialisation, so that the scores a head gives are not all near 0.5."""
    import paddle

    for name, p in model.named_parameters():
        if "classifier" in name or "emb_reduce" in name:
            p.set_value(p * 8.0)
    paddle.seed(SEED)


def make_checkpoint(form: str, out: str | Path, shape: str = "tiny") -> Path:
    """A checkpoint folder of `form` at `out` (config.json, model_state.pdparams, vocab.txt)."""
    import paddle
    from paddlenlp.transformers import ErnieForSequenceClassification, ErnieModel
    from paddlenlp.transformers.semantic_search.modeling import ErnieEncoder

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paddle.seed(SEED)
    if form in ("rocketqa_tower", "rocketqa_tower_plain"):
        config = _config(shape)
        model = ErnieEncoder(config, output_emb_size=PROJECTION if form == "rocketqa_tower" else None)
        _scaled(model)
        model.save_pretrained(str(out))
    elif form == "cross_encoder":
        config = _config(shape, num_labels=2)
        model = ErnieEncoder(config)
        _scaled(model)
        model.save_pretrained(str(out))
    elif form in ("seq_cls_1", "seq_cls_2"):
        labels = int(form[-1])
        config = _config(shape, num_labels=labels)
        model = ErnieForSequenceClassification(config)
        _scaled(model)
        model.save_pretrained(str(out))
    elif form == "ernie_model":
        config = _config(shape)
        model = ErnieModel(config)
        model.save_pretrained(str(out))
    elif form == "recipe":
        config = _config(shape)
        model = ErnieModel(config)
        projection = paddle.nn.Linear(config.hidden_size, PROJECTION)
        state = {f"ptm.{k}": v for k, v in model.state_dict().items()}
        state |= {f"emb_reduce_linear.{k}": v * 8.0 for k, v in projection.state_dict().items()}
        paddle.save(state, str(out / "model_state.pdparams"))
        config.save_pretrained(str(out))  # the config of the ERNIE it started from, beside the recipe's weights
    else:
        raise ValueError(f"unknown form {form!r}")
    _finish(out, config)
    return out


def _encode(root: Path, texts, pairs=None, max_seq_len: int = 128):
    from paddlenlp.transformers import ErnieTokenizer

    tokenizer = ErnieTokenizer.from_pretrained(str(root))
    enc = tokenizer(
        list(texts),
        text_pair=list(pairs) if pairs is not None else None,
        max_length=max_seq_len,
        truncation=True,
        padding=True,
        return_attention_mask=False,
    )
    import paddle

    return paddle.to_tensor(np.array(enc["input_ids"], dtype=np.int64)), paddle.to_tensor(
        np.array(enc["token_type_ids"], dtype=np.int64)
    )


def reference(form: str, root: str | Path, texts, pairs=None, pooling: str = "cls") -> np.ndarray:
    """What the form's own code answers in Paddle's dygraph: RocketQA's ErnieDualEncoder.get_pooled_embedding,
    ErnieCrossEncoder.matching (P(label 1)), the recipe's pooled -> emb_reduce_linear -> L2 normalization, an
    ErnieModel pooled as `pooling` says, a classifier's P(label 1) (2 labels) or sigmoid (1 label)."""
    import paddle
    import paddle.nn.functional as F
    from paddlenlp.transformers import ErnieForSequenceClassification, ErnieModel
    from paddlenlp.transformers.semantic_search.modeling import ErnieCrossEncoder, ErnieDualEncoder

    root = Path(root)
    ids, types = _encode(root, texts, pairs)
    with paddle.no_grad():
        if form in ("rocketqa_tower", "rocketqa_tower_plain"):
            dual = ErnieDualEncoder(str(root), output_emb_size=PROJECTION if form == "rocketqa_tower" else None)
            dual.eval()
            out = dual.get_pooled_embedding(ids, token_type_ids=types)
        elif form == "cross_encoder":
            cross = ErnieCrossEncoder(str(root))
            cross.eval()
            out = cross.matching(ids, token_type_ids=types)
        elif form in ("seq_cls_1", "seq_cls_2"):
            model = ErnieForSequenceClassification.from_pretrained(str(root))
            model.eval()
            logits = model(ids, token_type_ids=types)
            out = F.sigmoid(logits[:, 0]) if form == "seq_cls_1" else F.softmax(logits, axis=-1)[:, 1]
        elif form == "ernie_model":
            model = ErnieModel.from_pretrained(str(root))
            model.eval()
            sequence, pooled = model(ids, token_type_ids=types)
            if pooling == "cls":
                out = sequence[:, 0]
            elif pooling == "pooled":
                out = pooled
            else:
                mask = paddle.cast(ids != 0, "float32").unsqueeze(-1)
                out = (sequence * mask).sum(axis=1) / mask.sum(axis=1)
        elif form == "recipe":
            state = paddle.load(str(root / "model_state.pdparams"))
            model = ErnieModel.from_pretrained(str(root), ignore_mismatched_sizes=False)
            model.set_state_dict({k[4:]: v for k, v in state.items() if k.startswith("ptm.")})
            model.eval()
            weight, bias = state["emb_reduce_linear.weight"], state["emb_reduce_linear.bias"]
            _, pooled = model(ids, token_type_ids=types)
            out = F.normalize(paddle.matmul(pooled, weight) + bias, p=2, axis=-1)
        else:
            raise ValueError(f"unknown form {form!r}")
    return np.asarray(out.numpy(), dtype=np.float32)


def ernie_deploy(*args: str, cwd: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "ernie_deploy.cli", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, env=_env(cwd)
    )


def _env(work: Path) -> dict:
    import os

    # The artifacts of the models made here stay under `work`, not the checkout's artifacts/.
    return {**os.environ, "ERNIE_DEPLOY_ARTIFACTS": str(work / "artifacts")}


# The models of the retrieval repository: name -> (form, task, extra `add` flags).
SERVED = {
    "ernie_embed": ("rocketqa_tower", "embed", ()),
    "ernie_rerank": ("cross_encoder", "rerank", ()),
    "recipe_embed": ("recipe", "embed", ()),
    "raw_rerank": ("seq_cls_1", "rerank", ("--score", "raw")),
}


def build_retrieval_repository(work: str | Path) -> Path:
    """A repository at work/models serving SERVED: `ernie_embed` (a RocketQA tower with a projection),
    `ernie_rerank` (RocketQA's cross-encoder), `recipe_embed` (the neural-search recipe's state, normalized in its
    graph) and `raw_rerank` (a 1-label classifier answering its raw logit), each converted under the parity gate
    through `ernie-deploy add`; their checkpoints are under work/sources/<form>. Returns the repository."""
    work = Path(work)
    repository = work / "models"
    texts = _parity_file(work)
    for name, (form, task, flags) in SERVED.items():
        source = make_checkpoint(form, work / "sources" / form)
        ernie_deploy(
            "add", "--task", task, "--model", name, "--source", str(source), "--repository", str(repository),
            "--parity-data", str(texts), *flags, cwd=work,
        )  # fmt: skip
    return repository


PARITY_TEXTS = (
    ("上海明天的天气怎么样", "上海市气象台预报明天多云转晴，最高气温二十三度。"),
    ("火箭队的比赛结果", "昨晚火箭队主场以一百零二比九十八击败湖人队。"),
    ("如何申请护照", "办理护照需要携带身份证到户籍所在地的出入境管理部门。"),
    ("股市今天涨了吗", "沪深两市今日高开高走，创业板指数上涨百分之二。"),
    ("北京有哪些大学", "北京大学和清华大学都位于北京市海淀区。"),
    ("手机电池不耐用怎么办", "关闭后台应用和降低屏幕亮度可以延长手机的续航时间。"),
)


def _parity_file(work: Path) -> Path:
    path = work / "parity.tsv"
    path.write_text("query\tpassage\n" + "".join(f"{q}\t{p}\n" for q, p in PARITY_TEXTS), encoding="utf-8")
    return path


if __name__ == "__main__":  # python tests/retrieval_fixtures.py WORK: build the repository there
    print(build_retrieval_repository(Path(sys.argv[1])))
