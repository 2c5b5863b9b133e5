"""A relevance score per (query, text) pair (semantic search's ranking): a cross-encoder's probability that the text
answers the query, or its raw logit."""

from ernie_deploy.kinds.base import Kind

KIND = Kind(
    name="rerank",
    # Its answer per pair: one score, [1].
    logits_rank=1,
    long_text_modes=("head",),
    prediction="score",
    metric="mrr_at_10",
    postprocess="rerank_postprocess",
    split_format="pairs.tsv",
    # Its graph answers one logit per pair (the log-odds of relevance), whatever head the checkpoint has.
    label_head=False,
    own_export=True,
    scored_per_text=False,
    proposed_by="embed",
)

# What a rerank model's `score` is (`export --score`, recorded with it): the probability that the text answers the
# query (the sigmoid of its logit: ErnieCrossEncoder.matching's softmax P(label 1) for a 2-label head), or the raw
# logit, TEI's raw_scores.
SCORES = ("probability", "raw")
DEFAULT_SCORE = "probability"
