#!/usr/bin/env python3
"""Embed texts with the served `ernie_embed` model over gRPC, or score retrieval with it.

    python clients/embed_grpc_client.py --text "如何申请护照" --text "上海明天的天气"   # each vector's dim and norm
    python clients/embed_grpc_client.py                      # InsuranceQA's test split: recall@10 and MRR@10
    python clients/embed_grpc_client.py --data pairs.tsv     # a `query<TAB>passage` file of your own
    python clients/embed_grpc_client.py --model query_tower --text "..."   # a model added with --model NAME

A split's distinct passages are the corpus its distinct queries are searched in (cosine); the last line is
`mrr_at_10: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import EMBED
from ernie_deploy.evaluate.retrieval import main

if __name__ == "__main__":
    sys.exit(main(EMBED, doc=__doc__))
