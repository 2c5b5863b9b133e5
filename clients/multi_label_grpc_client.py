#!/usr/bin/env python3
"""Tag texts with the set of entity types they mention, through the served `ernie_multilabel` ensemble over gRPC,
and report micro and macro F1.

    python clients/multi_label_grpc_client.py                     # the MSRA multi-label test split
    python clients/multi_label_grpc_client.py --data my.labels.tsv --report report.json
    python clients/multi_label_grpc_client.py --text "国务院总理李鹏今天在人民大会堂会见了日本客人。"
    python clients/multi_label_grpc_client.py --model people --text "..."  # a model built with `build --model people`

Prints per-label precision/recall/F1 and the micro and macro averages; the last line is `micro_f1: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import MULTI_LABEL
from ernie_deploy.evaluate.served import main

if __name__ == "__main__":
    sys.exit(main(MULTI_LABEL, doc=__doc__))
