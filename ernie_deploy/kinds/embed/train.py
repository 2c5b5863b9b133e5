"""How the embed demo model is trained: one ErnieEncoder embeds questions and answers alike (one served model embeds
both), its [CLS] vector trained on in-batch negatives: a softmax over each question's cosines with the batch's
answers, at a temperature. The run around it is train.retrieval's."""

from __future__ import annotations

from functools import partial

import numpy as np

from ernie_deploy.train import retrieval
from ernie_deploy.train.batching import shuffled_batches
from ernie_deploy.train.kind_recipe import KindRecipe


def _train(run: retrieval.Run):
    import paddle
    import paddle.nn.functional as F

    recipe, size = run.recipe, run.recipe["eval_batch_size"]
    model = retrieval.encoder(run.base, ["LABEL_0", "LABEL_1"])
    dev, test, pairs = run.searches("dev"), run.searches("test"), run.splits["train"]
    start = {"dev": retrieval.search(model, run.encode, dev, size)[0]}
    start["test"] = retrieval.search(model, run.encode, test, size)[0]
    known = set(pairs)

    def loss_of(batch: list[int]):
        rows = [pairs[i] for i in batch]
        asked, answers = (model(*run.encode([row[side] for row in rows]))[0][:, 0] for side in (0, 1))
        logits = F.normalize(asked, axis=-1) @ F.normalize(answers, axis=-1).T / recipe["temperature"]
        # A row's answer that also answers another row's question (a question with several answers, an answer shared
        # by questions) is masked out of that row's negatives: a positive is never counted as a negative.
        own = [[r != c and (q, a) in known for c, (_, a) in enumerate(rows)] for r, (q, _) in enumerate(rows)]
        if any(map(any, own)):
            logits = logits - 1e4 * paddle.to_tensor(np.asarray(own, dtype="float32"))
        return F.cross_entropy(logits, paddle.arange(len(batch)).unsqueeze(-1))

    lengths = [len(passage) for _, passage in pairs]  # characters: word pieces are about as many
    batches = partial(shuffled_batches, lengths, recipe["batch_size"], recipe["bucket_batches"])
    record = retrieval.fit(model, recipe, batches, loss_of, lambda: retrieval.search(model, run.encode, dev, size)[0])
    record["start_scores"] = start
    texts = sorted({text for pair in pairs for text in pair})
    return model, record, retrieval.token_lengths(run, texts)


RECIPE = KindRecipe(metric_name=retrieval.METRIC, run=partial(retrieval.train_into, trainer=_train))
