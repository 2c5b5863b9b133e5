"""A label per text: one text (or a pair) in, one of the model's labels out, with its softmax confidence."""

from ernie_deploy.kinds.base import Kind

KIND = Kind(
    name="sequence",
    logits_rank=1,
    # A label per text needs the text in one model input: its head, or its head and its tail.
    long_text_modes=("head", "head_tail"),
    prediction="label",
    metric="accuracy",
    postprocess="seq_cls_postprocess",
    split_format="tsv",
    graph_postprocess="softmax_argmax_label",
    # PaddleNLP's `label` is the class id (INT64), its `confidence` the top class's softmax probability; every label's
    # probability and the raw logits (on request: core.tasks.ON_REQUEST) keep their own names, which that pipeline
    # never used.
    paddlenlp_outputs=(
        ("label", "label_id"),
        ("confidence", "confidence"),
        ("probabilities", "probabilities"),
        ("logits", "logits"),
    ),
)
