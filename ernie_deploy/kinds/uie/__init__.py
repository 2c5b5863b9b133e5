"""Spans of the types a schema names (UIE, Universal Information Extraction): per text, Taskflow's answer
`{type: [{"text", "start", "end", "probability", "relations": {...}}]}`, read in stages by one python model."""

from ernie_deploy.kinds.base import Kind

KIND = Kind(
    name="uie",
    # Each of its outputs is one probability per token of a row: [tokens].
    logits_rank=1,
    # A text longer than a row is read in windows, each with the prompt again (serving.spans.prompt_rows).
    long_text_modes=("window",),
    prediction="result",
    metric="span_f1",
    # Its one step: tokenizer, model runs (one per schema depth) and span decoding, in one python model.
    postprocess="uie_extract",
    # MSRA's per-character tags, read as spans of each entity type (kinds/uie/evaluate.py).
    split_format="jsonl",
    model_outputs=("start_prob", "end_prob"),
    label_head=False,
    staged=True,
)

# The demo's entity types as UIE prompts: MSRA's tags and Taskflow's names, the schema the bootstrap is trained with
# (kinds/uie/train.py) and scored with (kinds/uie/evaluate.py).
ENTITY_PROMPTS = {"PER": "人名", "LOC": "地名", "ORG": "机构名"}
