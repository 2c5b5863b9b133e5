"""The section of docs/BENCHMARKS.md on embed models (docs/embed.json): served texts/s, of the default build and of one
with max batch size 1, against the in-process limit of the same ONNX model, and against infinity-emb on a BERT of the
same shape."""

from __future__ import annotations

from benchmarks import embed
from benchmarks.embed_model import NAME
from benchmarks.page_parts import run_lines, wrap

EMBED = """\
`python -m benchmarks.embed` (`--rounds`, `--duration`, `--out`, `--peer-python`, `--peer-engines`) adds an embed
model with `ernie-deploy add --task embed` (parity gate), in two builds, and serves both from one tritonserver: the
fused python model, one vector a text. One text a request, each cell in rounds, keeping its best round:

- **in-process**: the step the server runs (built from the model's own `config.pbtxt` and version folder), handed 1 or
  8 one-text requests a call as Triton's dynamic batcher hands them, no server; the better of the two is the limit;
- **gRPC**: the closed loop of `bench/load.py` at concurrency 1 and 8, on each of two builds of the same model that
  differ only in `max_batch_size`: the default build's {batch} (Triton's dynamic batcher merges concurrent requests
  into one batch of up to {batch} texts) and `add --max-batch-size 1`'s (each request runs alone);
- **gateway /v1/embeddings**: `ernie-deploy gateway`'s OpenAI route, at concurrency 1 and 8;
- **infinity-emb**: the peer a user would pick instead, serving a Hugging Face BERT of the same shape from a local
  folder through its own OpenAI-style route (`POST /embeddings`), at concurrency 1 and 8, on each engine it offers on a
  CPU. It runs in a virtual environment of its own (the module's docstring says how to install it), started by the
  benchmark so that it shares the same cores.

The gateway's and the peer's cells are sent by one HTTP load generator, the same body to both. The goals: served c8
at {limit:.1f}× the in-process limit or more; c8 at the peer's throughput or more, and a lone request's p50 at the
peer's or less, against the peer's best engine in each."""


POOLED = {"cls": "[CLS] hidden state", "pooled": "pooler's output", "mean": "tokens' mean hidden state"}


def _versions(versions: dict) -> str:
    return ", ".join(f"{name} {v}" for name, v in versions.items() if v)


def embeddings(results) -> list[str]:
    record = results("embed.json")
    model, facts, peer, cells = record["model"], record["facts"], record.get("peer") or {}, record["cells"]
    config = peer.get("model", {}).get("config", {})
    about = (
        f"The model: {model['checkpoint']}, {model['layers']} layers × {model['hidden']}, "
        f"{model['params'] / 1e6:.1f} M parameters, answering its {POOLED.get(model['pooling'], model['pooling'])} "
        f"({model['dim']} numbers); "
        "max_seq_len "
        f"{model['max_seq_len']}. "
        f"The texts: {record['texts']['source']}; {record['texts']['count']} texts, "
        f"{record['texts']['mean_chars']:.0f} characters and {facts['tokens_per_text']:.1f} tokens ([CLS] and [SEP] "
        f"included) on average. Served vectors compared with the in-process step's on the first {cells['checked']} "
        f"texts: least cosine {facts['grpc_min_cosine']:.6f} over gRPC"
        + (f" ({facts['grpc_mbs1_min_cosine']:.6f} at max batch size 1)" if "grpc_mbs1_min_cosine" in facts else "")
        + (f", {facts['gateway_min_cosine']:.6f} through the gateway" if "gateway_min_cosine" in facts else "")
        + "."
    )
    if peer:
        p = facts.get("peer", {})
        agree = ", ".join(f"{c:.6f} ({e})" for e, c in p.get("agree_min_cosine", {}).items())
        tokens = ", ".join(f"{t:.1f} ({e})" for e, t in p.get("tokens_per_text", {}).items())
        about += (
            f"\n\nThe peer: {_versions(peer['versions'])}. Its model: BertModel, {config.get('num_hidden_layers')} × "
            f"{config.get('hidden_size')}, {config.get('num_attention_heads')} heads, intermediate "
            f"{config.get('intermediate_size')}, vocabulary {config.get('vocab_size')}, "
            f"{config.get('max_position_embeddings')} positions ({peer['model']['params'] / 1e6:.1f} M parameters), "
            "random weights, a fast BERT tokenizer of the same vocabulary file, mean pooling (sentence-transformers' "
            "for a plain BERT); the optimum engine reads optimum's ONNX export of it. Its engines' vectors agree with "
            f"the first's to a least cosine of {agree}; the tokens a text its answers count (without [CLS] and [SEP]): "
            f"{tokens}."
        )
    skipped = [f"- {what}: skipped, {why}" for what, why in record.get("skipped", {}).items()]
    return [
        "## Embeddings",
        "",
        wrap(EMBED.format(limit=record["goals"]["c8_over_limit"], batch=model["max_batch_size"][NAME])),
        "",
        wrap(about),
        "",
        *run_lines(
            record,
            end=record.get("loadavg_end"),
            during=[r["load_average"] for r in record["rows"]],
            kept_as="embed.json",
        ),
        f"- cells: {cells['rounds']} rounds, {cells['warmup_s']:g} s warm-up and {cells['duration_s']:g} s measured a "
        f"cell; cores {', '.join(map(str, record['cores']))} for the server, the gateway, the peer and the load",
        *([wrap("\n".join(skipped))] if skipped else []),
        "",
        embed.render(record["best"], record["ratios"]),
        "",
        wrap(
            "Throughput in texts/s; latencies are a request's (in-process: a call's, of 1 or 8 texts); *server CPU* is "
            "tritonserver's process group's (with the gateway's, for its cells) or the peer's, over the cell's texts. "
            f"The limit is in-process batch {record['ratios']['limit_batch']}."
        ),
    ]
