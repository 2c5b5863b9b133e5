#!/usr/bin/env python3
"""Find named entities (PER, LOC, ORG) with the served `ernie_tokencls` ensemble over gRPC and report F1.

    python clients/token_cls_grpc_client.py                     # the MSRA NER test split (5,000 sentences)
    python clients/token_cls_grpc_client.py --data my.jsonl --report report.json
    python clients/token_cls_grpc_client.py --text "张三在北京大学读书"
    python clients/token_cls_grpc_client.py --model my_ner --text "..."  # a model built with `build --model my_ner`

Scores are entity-level (seqeval, strict IOB2): an entity counts when its type, start and end all match.
Prints per-type precision/recall/F1; the last line is `f1: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import TOKEN_CLS
from ernie_deploy.evaluate.served import main

if __name__ == "__main__":
    sys.exit(main(TOKEN_CLS, doc=__doc__))
