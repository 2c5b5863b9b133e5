"""A vector per text (semantic search's recall): one text in, its embedding out, as the checkpoint pools it."""

from ernie_deploy.kinds.base import Kind

KIND = Kind(
    name="embed",
    # Its answer per text: one vector, [dim].
    logits_rank=1,
    # A vector is read from the text's head; a text past max_seq_len is truncated on request, else refused (TEI's
    # rule, on the gateway's routes).
    long_text_modes=("head",),
    prediction="embedding",
    metric="mrr_at_10",
    postprocess="embed_postprocess",
    # (query, relevant passage) pairs, one per line: a split's passages are its corpus (kinds/embed/evaluate.py).
    split_format="pairs.tsv",
    # The pooled vector, under the pipeline's model output name (core.tasks.LOGITS): the graph pools it itself.
    label_head=False,
    own_export=True,
    # The least cosine of one text's vector, Paddle's against onnxruntime's: served RocketQA towers measured
    # 0.99999994 at ERNIE 3.0 nano and base shapes (max abs diff 6.7e-6 and 9.5e-6; tests/test_retrieval_shapes.py
    # prints both), so 1e-5 off a cosine of 1 leaves room for other hosts' kernels; mean pooling read as cls gives
    # 0.58 on the 2-layer random-weight ErnieModel of tests/retrieval_fixtures.py.
    parity_cosine=0.99999,
    scored_per_text=False,
)

# How a plain ErnieModel's vector is pooled (`export --pooling`, recorded with it): its [CLS] hidden state (the
# default, as RocketQA reads its towers), the pooler's tanh output (as the neural-search recipe reads its own), or the
# mean of the real tokens' hidden states.
POOLINGS = ("cls", "pooled", "mean")
DEFAULT_POOLING = "cls"
