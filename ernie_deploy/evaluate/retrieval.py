"""Retrieval scored through the served models: the client scripts of the embed and rerank kinds
(clients/embed_grpc_client.py, clients/rerank_grpc_client.py).

A split of (query, passage) pairs (fetch.data's `query<TAB>passage` TSV) is searched as retrieval is scored: every
distinct passage of the split is the corpus, every distinct query is searched in it, and a query's relevant passages
are those it is paired with. The embed model ranks the corpus by cosine (recall@k, MRR@k); the rerank model
re-orders the embed model's top candidates of each query by its score (MRR@k, NDCG@k), reported beside the embed
model's own ranking of the same candidates, so that what reranking adds is one subtraction."""

from __future__ import annotations

import argparse
import sys

import numpy as np

from ernie_deploy.client.grpc_client import Client, decode_outputs
from ernie_deploy.core.endpoints import DEFAULT_GRPC_URL
from ernie_deploy.core.errors import AccuracyGateError, BadOptionsError, ErnieDeployError
from ernie_deploy.core.files import write_json
from ernie_deploy.core.tasks import DEMO_MODELS, EMBED, RERANK, TaskSpec
from ernie_deploy.core.tls import add_tls_arguments, tls_from_args
from ernie_deploy.export.gates import require_at_least
from ernie_deploy.fetch.data import data_dir, read_split, read_split_file
from ernie_deploy.serving.ranking import CANDIDATES, K, ranking_report, searches, top_k, unit


def ndcg(candidates: np.ndarray, scores: np.ndarray, relevant: list[set[int]], k: int = K) -> float:
    """NDCG@k of each query's candidates (corpus indices) ordered by `scores` (scikit-learn's ndcg_score, binary
    relevance); a query without a relevant candidate scores 0."""
    from sklearn.metrics import ndcg_score

    gains = np.array([[1.0 if int(i) in gold else 0.0 for i in row] for row, gold in zip(candidates, relevant)])
    if gains.shape[1] < 2:
        raise BadOptionsError("NDCG needs at least 2 candidates a query", "pass --candidates 2 or more")
    return float(ndcg_score(gains, np.asarray(scores, dtype=np.float64), k=k))


def rerank_report(candidates: np.ndarray, cosines: np.ndarray, scores: np.ndarray, relevant: list[set[int]]) -> dict:
    """MRR@k, recall@k and NDCG@k of each query's `candidates` (the embed model's top ones, by their `cosines`)
    re-ordered by the rerank model's `scores` (ties keep the embed model's order), beside the embed model's own."""
    reranked = np.take_along_axis(candidates, np.argsort(-scores, axis=1, kind="stable"), axis=1)
    embedded = ranking_report(candidates, relevant)
    return {
        **ranking_report(reranked, relevant),
        f"ndcg_at_{K}": ndcg(candidates, scores, relevant),
        f"embed_mrr_at_{K}": embedded[f"mrr_at_{K}"],
        f"embed_ndcg_at_{K}": ndcg(candidates, cosines, relevant),
        "candidates": int(candidates.shape[1]),
    }


def _parser(task: TaskSpec, doc: str | None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--grpc-url", default=DEFAULT_GRPC_URL, help="Triton gRPC address (default %(default)s)")
    parser.add_argument(
        "--model", default=DEMO_MODELS[task.name], help=f"the served {task.name} model (default %(default)s)"
    )
    parser.add_argument("--data", help=f"a `query<TAB>passage` TSV split (default: the {task.dataset} test split)")
    parser.add_argument("--queries", type=int, metavar="N", help="score the split's first N queries only")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--report", help="write the scores as JSON")
    parser.add_argument(
        "--min-score", type=float, help=f"exit 3 when the split's MRR@{K} is below this (a release gate in CI)"
    )
    add_tls_arguments(parser)
    return parser


def _split(task: TaskSpec, args) -> tuple[list[str], list[str], list[set[int]]]:
    pairs = read_split_file(args.data)[0] if args.data else read_split(data_dir(task.dataset), "test", "pairs.tsv")[0]
    queries, corpus, relevant = searches(pairs)
    if args.queries is not None:
        if args.queries < 1:
            raise BadOptionsError(f"--queries {args.queries} scores nothing", "pass --queries 1 or more")
        queries, relevant = queries[: args.queries], relevant[: args.queries]
    return queries, corpus, relevant


def embed_ranking(client: Client, queries: list[str], corpus: list[str], batch_size: int) -> np.ndarray:
    """Cosine of every query with every passage, [queries, corpus], through the served embed model."""
    passages = unit(np.stack(client.predict(corpus, batch_size)))
    asked = unit(np.stack(client.predict(queries, batch_size)))
    return asked @ passages.T


def _finish(report: dict, args, what: str) -> int:
    for key, value in report.items():
        if isinstance(value, float) and key != report["metric"]:
            print(f"{key}: {value:.4f}")
    if args.report:
        write_json(report, args.report)
    print(f"{report['metric']}: {report[report['metric']]:.4f} (n={report['n']})")
    if args.min_score is not None:
        require_at_least(report[report["metric"]], args.min_score, what)
    return 0


def _run(body) -> int:
    try:
        return body()
    except AccuracyGateError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except ErnieDeployError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def embed_parser(doc: str | None = None) -> argparse.ArgumentParser:
    parser = _parser(EMBED, doc)
    parser.add_argument("--text", action="append", help="embed this text and print its dim and norm (repeatable)")
    return parser


def embed_main(argv: list[str] | None = None, doc: str | None = None) -> int:
    """clients/embed_grpc_client.py: each --text's vector (its dim and L2 norm), or recall@10 and MRR@10 of a split."""
    args = embed_parser(doc).parse_args(argv)

    def body() -> int:
        with Client(EMBED, args.grpc_url, model=args.model, tls=tls_from_args(args)) as client:
            client.check_ready()
            if args.text:
                for text, vector in zip(args.text, decode_outputs(EMBED, client.infer(args.text))):
                    print(f"dim {vector.shape[-1]}\tnorm {float(np.linalg.norm(vector)):.4f}\t{text}")
                return 0
            queries, corpus, relevant = _split(EMBED, args)
            scores = embed_ranking(client, queries, corpus, args.batch_size)
        report = {**ranking_report(top_k(scores, K), relevant), "corpus": len(corpus)}
        return _finish(report, args, f"{args.model}'s MRR@{K}")

    return _run(body)


def rerank_parser(doc: str | None = None) -> argparse.ArgumentParser:
    parser = _parser(RERANK, doc)
    parser.add_argument("--query", help="rank each --text for this query and print them, best first")
    parser.add_argument("--text", action="append", help="a text to rank for --query (repeatable)")
    parser.add_argument(
        "--embed-model",
        default=DEMO_MODELS[EMBED.name],
        help="with a split: the served embed model whose top candidates are reranked (default %(default)s)",
    )
    parser.add_argument(
        "--candidates",
        type=int,
        default=CANDIDATES,
        help="with a split: candidates per query reranked (default %(default)s)",
    )
    return parser


def rerank_main(argv: list[str] | None = None, doc: str | None = None) -> int:
    """clients/rerank_grpc_client.py: --query and its --text ranked by the served score, or a split's MRR@10 and
    NDCG@10 of the embed model's top candidates re-ordered, beside the embed model's own order of them."""
    args = rerank_parser(doc).parse_args(argv)

    def body() -> int:
        if bool(args.query) != bool(args.text):
            raise BadOptionsError("--query and --text go together", "give one --query and the --text to rank for it")
        with Client(RERANK, args.grpc_url, model=args.model, tls=tls_from_args(args)) as reranker:
            reranker.check_ready()
            if args.query:
                scores = decode_outputs(RERANK, reranker.infer([(args.query, text) for text in args.text]))
                for score, text in sorted(zip(scores, args.text), key=lambda pair: -pair[0]):
                    print(f"{score:.4f}\t{text}")
                return 0
            queries, corpus, relevant = _split(RERANK, args)
            with Client(EMBED, args.grpc_url, model=args.embed_model, tls=tls_from_args(args)) as embedder:
                embedder.check_ready()
                recall = embed_ranking(embedder, queries, corpus, args.batch_size)
            candidates = top_k(recall, args.candidates)
            pairs = [(query, corpus[int(i)]) for query, row in zip(queries, candidates) for i in row]
            scores = np.array(reranker.predict(pairs, args.batch_size), dtype=np.float32).reshape(candidates.shape)
        report = rerank_report(candidates, np.take_along_axis(recall, candidates, axis=1), scores, relevant)
        report["corpus"] = len(corpus)
        return _finish(report, args, f"{args.model}'s MRR@{K} over {args.embed_model}'s candidates")

    return _run(body)


# The client script of each retrieval kind: its options and its run, by the kind's name.
CLIENTS = {EMBED.kind: (embed_parser, embed_main), RERANK.kind: (rerank_parser, rerank_main)}


def client_parser(task: TaskSpec, doc: str | None = None) -> argparse.ArgumentParser:
    """The options of `task`'s client script."""
    return CLIENTS[task.kind][0](doc)


def main(task: TaskSpec, argv: list[str] | None = None, doc: str | None = None) -> int:
    """`task`'s client script (clients/<task>_grpc_client.py)."""
    return CLIENTS[task.kind][1](argv, doc)
