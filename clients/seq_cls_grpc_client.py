#!/usr/bin/env python3
"""Classify texts with the served `ernie_seqcls` ensemble over gRPC and report accuracy.

    python clients/seq_cls_grpc_client.py                       # the THUCNews test split
    python clients/seq_cls_grpc_client.py --data my.tsv --report report.json
    python clients/seq_cls_grpc_client.py --text "国足公布世预赛名单"

The last line printed is `accuracy: 0.XXXX (n=N)`.
"""

from __future__ import annotations

import argparse
import sys

from ernie_deploy.client import DEFAULT_URL, Client
from ernie_deploy.errors import ErnieDeployError
from ernie_deploy.tasks import SEQ_CLS


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help="Triton gRPC address (default %(default)s)")
    parser.add_argument("--data", help="TSV with a `label<TAB>text` header (default: the THUCNews test split)")
    parser.add_argument("--text", action="append", help="classify this text and print the result (repeatable)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--report", help="write accuracy, per-class scores and the confusion matrix as JSON")
    args = parser.parse_args(argv)
    try:
        with Client(SEQ_CLS, args.url) as client:
            client.check_ready()
            if args.text:
                out = client.infer(args.text)
                for text, label, conf in zip(args.text, out["label"][:, 0], out["confidence"][:, 0]):
                    print(f"{label.decode('utf-8')}\t{conf:.4f}\t{text}")
                return 0
            from ernie_deploy.data import data_dir, label_names, read_tsv
            from ernie_deploy.metrics import classification_report, format_report, write_json

            texts, gold = read_tsv(args.data or data_dir(SEQ_CLS.dataset) / "test.tsv")
            out = client.infer_all(texts, args.batch_size)
        predicted = [label.decode("utf-8") for label in out["label"][:, 0]]
        report = classification_report(gold, predicted, label_names(gold + predicted))
        print(format_report(report))
        if args.report:
            write_json(report, args.report)
        print(f"accuracy: {report['accuracy']:.4f} (n={report['n']})")
        return 0
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
