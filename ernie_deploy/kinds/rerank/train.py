"""How the rerank demo model is trained: a cross-encoder (its classifier reads the pooled output of
`[CLS] question [SEP] answer [SEP]`, as ErnieCrossEncoder.matching does) learns each train question's answers (label
1) against answers the base embed model ranks high for it that are not its own (hard negatives) and random ones
(label 0). It starts from that embed model's encoder; the epoch is chosen by dev MRR@10 of the embed model's top 20
re-ordered, as the rerank client scores it. The run around it is train.retrieval's."""

from __future__ import annotations

from functools import partial

from ernie_deploy.serving.ranking import CANDIDATES, ranking_report
from ernie_deploy.train import retrieval
from ernie_deploy.train.batching import shuffled_batches
from ernie_deploy.train.kind_recipe import KindRecipe


def _train(run: retrieval.Run):
    import numpy as np
    import paddle
    import paddle.nn.functional as F

    recipe, size = run.recipe, run.recipe["eval_batch_size"]
    embedder = retrieval.encoder(run.base, ["LABEL_0", "LABEL_1"])
    (queries, corpus, relevant), dev = run.searches("train"), run.searches("dev")
    depth = CANDIDATES + max(len(gold) for gold in relevant)
    ranked = retrieval.search(embedder, run.encode, (queries, corpus, relevant), size, depth)[1]
    mined = [[int(i) for i in row if i not in gold][:CANDIDATES] for row, gold in zip(ranked, relevant)]
    few = recipe["dev_queries"] or len(dev[0])
    dev = dev[0][:few], dev[1], dev[2][:few]
    candidates = retrieval.search(embedder, run.encode, dev, size, CANDIDATES)[1][:, :CANDIDATES]
    dev_pairs = [(q, dev[1][int(i)]) for q, row in zip(dev[0], candidates) for i in row]
    del embedder
    model = retrieval.encoder(run.base, ["irrelevant", "relevant"])

    def batches(rng) -> list[list[tuple[int, int, int]]]:
        rows = []
        for q in rng.permutation(len(queries))[: recipe["questions_per_epoch"] or None]:
            gold = sorted(relevant[q])
            hard = rng.choice(mined[q], min(recipe["hard_negatives"], len(mined[q])), replace=False)
            drawn = [int(p) for p in rng.randint(len(corpus), size=2 * recipe["random_negatives"] + 8)]
            others = [int(p) for p in hard] + [p for p in drawn if p not in relevant[q]][: recipe["random_negatives"]]
            rows += [(q, gold[rng.randint(len(gold))], 1)] + [(q, p, 0) for p in others]
        lengths = [len(queries[q]) + len(corpus[p]) for q, p, _ in rows]
        order = shuffled_batches(lengths, recipe["batch_size"], recipe["bucket_batches"], rng)
        return [[rows[i] for i in b] for b in order]

    def loss_of(batch: list[tuple[int, int, int]]):
        pooled = model(*run.encode([(queries[q], corpus[p]) for q, p, _ in batch]))[1]
        logits = model.classifier(model.dropout(pooled))  # as ErnieCrossEncoder.matching reads it
        return F.cross_entropy(logits, paddle.to_tensor([[y] for _, _, y in batch], dtype="int64"))

    def score() -> dict:
        # The served score's order: P(label 1) rises with the two logits' difference.
        logits = retrieval.outputs(model, run.encode, dev_pairs, size, lambda _, pooled: model.classifier(pooled))
        order = np.argsort(-(logits[:, 1] - logits[:, 0]).reshape(candidates.shape), axis=1, kind="stable")
        return ranking_report(np.take_along_axis(candidates, order, axis=1), dev[2])

    record = retrieval.fit(model, recipe, batches, loss_of, score)
    record["dev_embed"] = ranking_report(candidates, dev[2])
    pairs = [(queries[q], corpus[p]) for q, gold in enumerate(relevant) for p in sorted(gold)]
    return model, record, retrieval.token_lengths(run, pairs)


RECIPE = KindRecipe(metric_name=retrieval.METRIC, run=partial(retrieval.train_into, trainer=_train))
