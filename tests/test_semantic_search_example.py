"""examples/semantic_search.py against a real gateway and tritonserver serving the retrieval repository: it indexes
a corpus through TEI's embed route into faiss, recalls each query's nearest passages and prints them reranked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.retrieval_fixtures import PARITY_TEXTS
from tests.test_gateway import _post

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def test_the_example_recalls_and_reranks_what_the_routes_answer(retrieval_gateway, tmp_path):
    corpus = tmp_path / "passages.txt"
    passages = [p for _, p in PARITY_TEXTS]
    corpus.write_text("\n".join(passages) + "\n", encoding="utf-8")
    query = PARITY_TEXTS[1][0]
    run = subprocess.run(
        [
            sys.executable,
            "examples/semantic_search.py",
            "--gateway",
            retrieval_gateway.url,
            "--corpus",
            str(corpus),
            "--query",
            query,
            "--top-k",
            "4",
            "--show",
            "3",
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[0] == f"indexed {len(passages)} passages (48 dims) with ernie_embed"
    hits = [line.split("\t") for line in lines[lines.index(f"query: {query}") + 1 :]]
    assert len(hits) == 3 and [hit[0] for hit in hits] == ["1", "2", "3"]
    # The 4 nearest passages by cosine, reranked: the printed order is the rerank route's own for them.
    status, _, vectors = _post(f"{retrieval_gateway.url}/hf/ernie_embed/embed", {"inputs": [query, *passages]})
    assert status == 200
    cosines = np.array(vectors[1:]) @ np.array(vectors[0])
    nearest = [passages[i] for i in np.argsort(-cosines, kind="stable")[:4]]
    status, _, ranked = _post(
        f"{retrieval_gateway.url}/hf/ernie_rerank/rerank", {"query": query, "texts": nearest, "truncate": True}
    )
    assert status == 200
    assert [hit[3] for hit in hits] == [nearest[r["index"]][:80] for r in ranked[:3]]
    assert [float(hit[1].split()[1]) for hit in hits] == pytest.approx([r["score"] for r in ranked[:3]], abs=1e-4)
