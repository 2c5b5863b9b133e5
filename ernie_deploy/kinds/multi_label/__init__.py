"""A set of labels per text: each label scored on its own (a sigmoid each) and kept over its own threshold."""

from ernie_deploy.kinds.base import Kind

KIND = Kind(
    name="multi_label",
    logits_rank=1,
    long_text_modes=("head",),
    prediction="labels",
    metric="micro_f1",
    postprocess="multi_label_postprocess",
    split_format="labels.tsv",
    per_label_thresholds=True,
)
