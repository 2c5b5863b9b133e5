#!/usr/bin/env python3
"""Rank texts for a query with the served `ernie_rerank` model over gRPC, or score reranking with it.

    python clients/rerank_grpc_client.py --query "如何申请护照" --text "办理护照需要身份证" --text "今天天气晴"
    python clients/rerank_grpc_client.py           # InsuranceQA's test split: ernie_embed's top 20, reranked
    python clients/rerank_grpc_client.py --data pairs.tsv --embed-model my_embed --candidates 50

With --query, prints each text's score and the text, best first. With a split, prints MRR@10 and NDCG@10 of the
reranked candidates beside the embed model's own order of the same candidates; the last line is
`mrr_at_10: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import RERANK
from ernie_deploy.evaluate.retrieval import main

if __name__ == "__main__":
    sys.exit(main(RERANK, doc=__doc__))
