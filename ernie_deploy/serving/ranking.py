"""What a ranking is, read the same by every scorer of retrieval: the served clients (evaluate.retrieval), the
offline scores of the exported models, and the demo models' training, which chooses its epoch by them. A split of
(query, passage) pairs is searched as retrieval is scored: its distinct passages are the corpus, its distinct queries
are searched in it, and a query's relevant passages are those it is paired with. numpy only."""

from __future__ import annotations

import numpy as np

from ernie_deploy.core.errors import BadDataError

K = 10  # recall@10, MRR@10, NDCG@10: the cut-offs retrieval is commonly reported at
# Each query's top candidates by the embed model that a rerank model re-orders (its client's default, its offline
# score's, and where its training draws hard negatives).
CANDIDATES = 20


def searches(pairs: list) -> tuple[list[str], list[str], list[set[int]]]:
    """(queries, corpus, relevant): the distinct queries and passages of (query, passage) pairs, in first-seen order,
    and for each query the indices of its passages in the corpus."""
    if not pairs or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        raise BadDataError(
            "the retrieval split holds no (query, passage) pairs",
            "pass a TSV with a `query<TAB>passage` header and one relevant passage per line",
        )
    queries: dict[str, int] = {}
    corpus: dict[str, int] = {}
    relevant: list[set[int]] = []
    for query, passage in pairs:
        q = queries.setdefault(query, len(queries))
        p = corpus.setdefault(passage, len(corpus))
        if q == len(relevant):
            relevant.append(set())
        relevant[q].add(p)
    return list(queries), list(corpus), relevant


def unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Each row's k best column indices, best first (ties: the lower index first)."""
    k = min(k, scores.shape[1])
    part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.take_along_axis(scores, part, axis=1)
    return np.take_along_axis(part, np.lexsort((part, -order), axis=1), axis=1)


def ranking_report(ranked: list, relevant: list[set[int]], k: int = K) -> dict:
    """recall@k (the share of each query's relevant passages in its top k, averaged over queries) and MRR@k (the
    reciprocal rank of its first relevant passage in the top k, 0 past k, averaged)."""
    recall, reciprocal = [], []
    for row, gold in zip(ranked, relevant):
        row = [int(i) for i in row[:k]]
        recall.append(len(gold.intersection(row)) / len(gold))
        first = next((rank for rank, i in enumerate(row, 1) if i in gold), None)
        reciprocal.append(1.0 / first if first else 0.0)
    return {
        "metric": f"mrr_at_{k}",
        f"mrr_at_{k}": float(np.mean(reciprocal)),
        f"recall_at_{k}": float(np.mean(recall)),
        "n": len(ranked),
    }
