#!/usr/bin/env python3
"""Semantic search over the gateway: recall from a vector index, then rerank, as PaddleNLP's neural-search
application does with its two ERNIE models.

    ernie-deploy serve --gateway                  # tritonserver, and the gateway on 127.0.0.1:8080
    python examples/semantic_search.py --query "如何申请护照"                          # InsuranceQA's test answers
    python examples/semantic_search.py --corpus passages.txt --query "..." --query "..."  # one passage a line

1. Every passage of the corpus is embedded through the gateway's TEI route (`POST /hf/<embed model>/embed`, unit
   vectors, long passages read to the model's length with `truncate: true`), --batch at a time, into a faiss inner
   product index (an inner product of unit vectors is their cosine).
2. Each query is embedded the same way (by --query-model, a dual encoder's query tower, where it has one) and the
   index gives its --top-k nearest passages.
3. The rerank model scores each (query, passage) pair (`POST /hf/<rerank model>/rerank`), and the --show best are
   printed: their rank, the rerank score, the cosine and the passage.

Needs `pip install faiss-cpu httpx` beside ernie-deploy's client side (the project's dev install has both).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

DEFAULT_CORPUS = Path("artifacts/data/insuranceqa/test.pairs.tsv")


def read_corpus(path: Path, limit: int | None) -> list[str]:
    """The passages of `path`: a `query<TAB>passage` split's distinct passages, or one passage a line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0] == "query\tpassage":
        passages = list(dict.fromkeys(line.split("\t", 1)[1] for line in lines[1:] if "\t" in line))
    else:
        passages = [line.strip() for line in lines if line.strip()]
    return passages[:limit] if limit else passages


class Gateway:
    """The gateway's retrieval routes, over one HTTP connection."""

    def __init__(self, url: str, timeout_s: float = 60.0):
        import httpx

        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s)

    def _post(self, path: str, body: dict):
        response = self.http.post(path, json=body)
        if response.status_code != 200:
            raise SystemExit(f"error: POST {path}: {response.status_code} {response.text}")
        return response.json()

    def embed(self, model: str, texts: list[str], batch: int) -> np.ndarray:
        """Unit vectors of `texts`, `batch` a request (at most the gateway's --max-client-batch-size)."""
        vectors = []
        for start in range(0, len(texts), batch):
            body = {"inputs": texts[start : start + batch], "normalize": True, "truncate": True}
            vectors.extend(self._post(f"/hf/{model}/embed", body))
        return np.asarray(vectors, dtype=np.float32)

    def rerank(self, model: str, query: str, texts: list[str]) -> list[dict]:
        """TEI's rerank answer: {"index", "score"} per text, best first."""
        return self._post(f"/hf/{model}/rerank", {"query": query, "texts": texts, "truncate": True})


def search(args) -> int:
    import faiss

    corpus = read_corpus(Path(args.corpus), args.limit)
    if not corpus:
        raise SystemExit(f"error: {args.corpus} holds no passage; pass a file of one passage a line")
    gateway = Gateway(args.gateway)
    vectors = gateway.embed(args.embed_model, corpus, args.batch)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    print(f"indexed {index.ntotal} passages ({vectors.shape[1]} dims) with {args.embed_model}")
    queries = gateway.embed(args.query_model or args.embed_model, args.query, args.batch)
    cosines, found = index.search(queries, min(args.top_k, len(corpus)))
    for query, row, near in zip(args.query, found, cosines):
        candidates = [corpus[i] for i in row]
        ranked = gateway.rerank(args.rerank_model, query, candidates)
        print(f"\nquery: {query}")
        for rank, hit in enumerate(ranked[: args.show], 1):
            i = hit["index"]
            print(f"{rank}\trerank {hit['score']:.4f}\tcosine {near[i]:.4f}\t{candidates[i][:80]}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gateway", default="http://127.0.0.1:8080", help="the gateway (default %(default)s)")
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="passages: one a line, or a pairs split")
    parser.add_argument("--limit", type=int, help="index the corpus's first N passages only")
    parser.add_argument("--query", action="append", required=True, help="a query (repeatable)")
    parser.add_argument("--embed-model", default="ernie_embed", help="the passages' embed model (default %(default)s)")
    parser.add_argument("--query-model", help="the queries' embed model (default: --embed-model)")
    parser.add_argument("--rerank-model", default="ernie_rerank", help="the rerank model (default %(default)s)")
    parser.add_argument("--top-k", type=int, default=20, help="candidates recalled and reranked (default 20)")
    parser.add_argument("--show", type=int, default=5, help="hits printed per query (default 5)")
    parser.add_argument("--batch", type=int, default=32, help="texts a request (default 32, the gateway's cap)")
    return search(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
