"""A label per token, which the postprocess turns into entities with character offsets into the text."""

from ernie_deploy.kinds.base import Kind

KIND = Kind(
    name="token",
    logits_rank=2,
    # A token model decides every token, so by default it reads the whole text in windows.
    long_text_modes=("window", "head"),
    prediction="entities",
    metric="f1",
    postprocess="token_cls_postprocess",
    split_format="jsonl",
    entities=True,
    # PaddleNLP's `OUTPUT`: per text, a list of {"pos": [start, end], "label"}, `end` inclusive (as JSON, which its
    # clients read as the Python literal it also is).
    paddlenlp_outputs=(("OUTPUT", "entities"),),
    paddlenlp_formats=("entities",),
)
