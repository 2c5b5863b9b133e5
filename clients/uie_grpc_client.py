#!/usr/bin/env python3
"""Extract spans (UIE) with the served `ernie_uie` model over gRPC: print each text's answer, or score a split.

    python clients/uie_grpc_client.py --text "张三在北京的百度公司工作"            # the schema the model was built with
    python clients/uie_grpc_client.py --text "..." --schema '["人物", {"公司": ["总部"]}]'
    python clients/uie_grpc_client.py                                        # span F1 on the MSRA NER test split
    python clients/uie_grpc_client.py --model my_uie --data my.jsonl --report report.json

With --text, each text is printed with its answer on the next line: one line of JSON, Taskflow's
{type: [{"text", "start", "end", "probability", "relations"}]}, in the order of the --text options. Without it, the
split's per-character tags are read as spans (PER, LOC, ORG as 人名, 地名, 机构名) and scored against the answers: a
span counts when its type, start and end all match. Prints per-type precision/recall/F1; the last line is
`span_f1: 0.XXXX (n=N)`.
"""

import sys

from ernie_deploy.core.tasks import UIE
from ernie_deploy.evaluate.served import main

if __name__ == "__main__":
    sys.exit(main(UIE, doc=__doc__))
