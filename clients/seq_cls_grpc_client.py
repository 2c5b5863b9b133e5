#!/usr/bin/env python3
"""Classify texts with the served `ernie_seqcls` ensemble over gRPC and report accuracy.

    python clients/seq_cls_grpc_client.py                       # the THUCNews test split
    python clients/seq_cls_grpc_client.py --data my.tsv --report report.json
    python clients/seq_cls_grpc_client.py --text "姚明缺阵火箭不敌湖人"
    python clients/seq_cls_grpc_client.py --model news --text "..."  # a model built with `build --model news`

Prints per-class precision/recall/F1 and the confusion matrix; the last line is `accuracy: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import SEQ_CLS
from ernie_deploy.evaluate.served import main

if __name__ == "__main__":
    sys.exit(main(SEQ_CLS, doc=__doc__))
