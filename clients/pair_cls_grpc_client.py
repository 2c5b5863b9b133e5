#!/usr/bin/env python3
"""Classify text pairs with the served `ernie_paircls` ensemble over gRPC and report accuracy.

    python clients/pair_cls_grpc_client.py                      # THUCNews title pairs: same class or not
    python clients/pair_cls_grpc_client.py --data pairs.tsv     # a `label<TAB>text<TAB>text_pair` file
    python clients/pair_cls_grpc_client.py --text "国足公布世预赛名单" --text-pair "中超联赛第五轮综述"
    python clients/pair_cls_grpc_client.py --model similar --text "..." --text-pair "..."  # a named pair model

Prints per-class precision/recall/F1 and the confusion matrix; the last line is `accuracy: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import PAIR_CLS
from ernie_deploy.evaluate.served import main

if __name__ == "__main__":
    sys.exit(main(PAIR_CLS, doc=__doc__))
