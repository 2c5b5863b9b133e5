"""A client in the shape of PaddleNLP's ERNIE 3.0 Triton pipeline clients, written from that pipeline's contract
alone: it knows nothing of ernie-deploy. It reads the model's input name from its metadata, sends texts as BYTES
[n, 1], 32 per request, asks for every output the pipeline answers, and reads them the way that pipeline's clients
do: `label` as class ids (compared with the dataset's ids) and `confidence`; `OUTPUT` as the text of a Python list of
{"pos": [start, end], "label"} with `end` inclusive.

    python tests/drop_in/paddlenlp_triton_client.py seq_cls --url 127.0.0.1:8001 --data test.tsv --labels a,b,c
    python tests/drop_in/paddlenlp_triton_client.py token_cls --url 127.0.0.1:8001 --texts texts.txt

Prints one JSON object: the accuracy and the predicted ids (seq_cls), or the entities per text (token_cls).
Standard library, numpy and tritonclient only.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient

BATCH = 32
OUTPUTS = {"seq_cls": ["label", "confidence"], "token_cls": ["OUTPUT"]}
MODELS = {"seq_cls": "ernie_seqcls", "token_cls": "ernie_tokencls"}


def infer(client, model: str, texts: list[str], outputs: list[str]) -> dict[str, list]:
    input_name = client.get_model_metadata(model).inputs[0].name
    got: dict[str, list] = {name: [] for name in outputs}
    for start in range(0, len(texts), BATCH):
        chunk = np.array([t.encode("utf-8") for t in texts[start : start + BATCH]], dtype=np.object_).reshape(-1, 1)
        tensor = grpcclient.InferInput(input_name, list(chunk.shape), "BYTES")
        tensor.set_data_from_numpy(chunk)
        result = client.infer(model, [tensor], outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
        for name in outputs:
            got[name].extend(result.as_numpy(name).reshape(-1).tolist())
    return got


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("task", choices=sorted(MODELS))
    p.add_argument("--url", default="127.0.0.1:8001")
    p.add_argument("--model")
    p.add_argument("--data", help="seq_cls: label<TAB>text lines")
    p.add_argument("--labels", help="seq_cls: the label names in id order, comma-separated")
    p.add_argument("--texts", help="token_cls: one text per line")
    args = p.parse_args(argv)
    client = grpcclient.InferenceServerClient(url=args.url)
    model = args.model or MODELS[args.task]
    if args.task == "seq_cls":
        names = args.labels.split(",")
        rows = [line.split("\t", 1) for line in open(args.data, encoding="utf-8").read().splitlines() if line]
        rows = rows[1:] if rows and rows[0] == ["label", "text"] else rows  # a header line
        gold = [names.index(label) for label, _ in rows]
        out = infer(client, model, [text for _, text in rows], OUTPUTS["seq_cls"])
        ids = [int(i) for i in out["label"]]
        accuracy = sum(a == b for a, b in zip(ids, gold)) / len(gold)
        print(json.dumps({"accuracy": accuracy, "n": len(gold), "ids": ids, "confidence": out["confidence"]}))
    else:
        texts = open(args.texts, encoding="utf-8").read().splitlines()
        out = infer(client, model, texts, OUTPUTS["token_cls"])
        spans = [ast.literal_eval(item.decode("utf-8")) for item in out["OUTPUT"]]
        entities = [
            [{"label": s["label"], "text": text[s["pos"][0] : s["pos"][1] + 1], "pos": s["pos"]} for s in found]
            for text, found in zip(texts, spans)
        ]
        print(json.dumps({"entities": entities}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
