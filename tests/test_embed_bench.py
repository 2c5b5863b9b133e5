"""`python -m benchmarks.embed`'s pure parts, nothing timed or served: each cell's best round, the ratios against the
in-process limit and the peer, the goals read from them, the texts it picks, the answers it accepts, and the
committed results file's shape (the page's Embeddings section renders from it, with or without the peer's cells)."""

from __future__ import annotations

import copy
import json

import pytest

from benchmarks import embed, page_embed
from benchmarks.embed_model import FALLBACK_TEXTS, NAME, NAME_MBS1, bench_texts, cosine, openai_answer, peer_config
from benchmarks.peer_rows import PeerRequest

from .conftest import ROOT

RECORD = ROOT / "docs" / "embed.json"


def _row(way, texts_per_s, p50, *, engine=None, batch=None, concurrency=None, round_=0):
    return {
        "way": way,
        "engine": engine,
        "batch": batch,
        "concurrency": concurrency,
        "round": round_,
        "texts": int(texts_per_s * 5),
        "texts_per_s": texts_per_s,
        "p50_ms": p50,
        "p90_ms": p50 * 1.5,
        "p99_ms": p50 * 2,
        "server_cpu_s": None if way == "in-process" else 4.0,
        "load_average": [1.0, 1.0, 1.0],
    }


ROWS = [
    _row("in-process", 200.0, 5.0, batch=1),
    _row("in-process", 150.0, 50.0, batch=8),
    _row("in-process", 210.0, 4.8, batch=1, round_=1),  # the better round of the same cell
    _row("grpc", 180.0, 5.5, concurrency=1),
    _row("grpc", 189.0, 40.0, concurrency=8),
    _row("grpc_mbs1", 190.0, 5.2, concurrency=1),
    _row("grpc_mbs1", 205.0, 37.0, concurrency=8),
    _row("gateway", 150.0, 6.5, concurrency=1),
    _row("gateway", 160.0, 48.0, concurrency=8),
    _row("peer", 90.0, 11.0, engine="torch", concurrency=1),
    _row("peer", 120.0, 60.0, engine="torch", concurrency=8),
    _row("peer", 100.0, 10.0, engine="ctranslate2", concurrency=1),
    _row("peer", 200.0, 38.0, engine="ctranslate2", concurrency=8),
]


def test_each_cell_keeps_its_best_round_in_the_tables_order():
    kept = embed.best(ROWS)
    assert len(kept) == len(ROWS) - 1
    assert next(r for r in kept if r["way"] == "in-process" and r["batch"] == 1)["texts_per_s"] == 210.0
    assert [embed.cell_name(r) for r in kept][:6] == [
        "in-process, 1 a call",
        "in-process, 8 a call",
        "gRPC c1",
        "gRPC c8",
        "gRPC (max batch size 1) c1",
        "gRPC (max batch size 1) c8",
    ]
    peers = [r["engine"] for r in kept if r["way"] == "peer"]
    assert peers == ["torch", "torch", "ctranslate2", "ctranslate2"]  # the engines in ENGINES' order


def test_ratios_read_the_limit_and_the_peers_best_engine_for_each_goal():
    ratio = embed.ratios(embed.best(ROWS))
    assert ratio["limit_batch"] == 1 and ratio["limit_texts_per_s"] == 210.0
    assert ratio["grpc_c8_over_limit"] == pytest.approx(0.9)
    assert ratio["gateway_c8_over_limit"] == pytest.approx(160 / 210)
    assert ratio["grpc_mbs1_c8_over_limit"] == pytest.approx(205 / 210)
    # c8 against the engine with the most texts/s, c1 against the one with the lowest p50
    assert ratio["peer_c8_engine"] == "ctranslate2" and ratio["grpc_c8_over_peer"] == pytest.approx(189 / 200)
    assert ratio["peer_c1_engine"] == "ctranslate2" and ratio["grpc_c1_p50_over_peer"] == pytest.approx(0.55)
    met = {what: ok for what, _, _, ok in embed.goals(ratio)}
    assert met["gRPC c8 / in-process limit"] and not met["gateway /v1/embeddings c8 / in-process limit"]
    assert not met["gRPC c8 / peer c8 (ctranslate2)"] and met["gRPC (max batch size 1) c8 / peer c8 (ctranslate2)"]
    assert met["gateway /v1/embeddings c1 p50 / peer c1 p50 (ctranslate2)"]  # 6.5 ms against 10: at most 1.0x


def test_without_the_peer_or_the_gateway_only_the_limit_is_read():
    ratio = embed.ratios(embed.best([r for r in ROWS if r["way"] in ("in-process", "grpc")]))
    assert "peer_c8_engine" not in ratio and "gateway_c8_over_limit" not in ratio
    assert [what for what, *_ in embed.goals(ratio)] == ["gRPC c8 / in-process limit"]
    table = embed.render(embed.best(ROWS[:5]), ratio)
    assert "| gRPC c8 | 189.0 |" in table and "| yes |" in table


def test_an_openai_answer_holds_one_vector_a_text():
    request = PeerRequest(b"{}", 1)
    assert openai_answer({"data": [{"embedding": [0.1, 0.2]}]}, request) is None
    assert openai_answer({"data": []}, request).startswith("malformed")
    assert openai_answer({"error": "no"}, request).startswith("malformed")
    assert cosine([1, 0], [2, 0]) == pytest.approx(1.0) and cosine([1, 0], [0, 3]) == pytest.approx(0.0)


def test_the_texts_are_questions_and_answers_that_fit_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("ERNIE_DEPLOY_ARTIFACTS", str(tmp_path))
    assert bench_texts(128) == (FALLBACK_TEXTS, bench_texts(128)[1])  # no split prepared: the fixed list
    folder = tmp_path / "data" / "insuranceqa"
    folder.mkdir(parents=True)
    pairs = [("问一", "答" * 10), ("问一", "长" * 20), ("问二", "答二"), ("问三", "答" * 10)]
    folder.joinpath("test.pairs.tsv").write_text(
        "query\tpassage\n" + "".join(f"{q}\t{a}\n" for q, a in pairs), encoding="utf-8"
    )
    texts, source = bench_texts(12)  # 10 characters fit: 12 tokens with [CLS] and [SEP]
    assert texts == ["问一", "答" * 10, "问二", "答二"]  # distinct, alternating, the 20-character answer left out
    assert "InsuranceQA" in source and all(len(t) <= 10 for t in texts)


def test_the_peers_model_has_the_nano_shape():
    assert peer_config() == {
        "hidden_size": 312,
        "num_hidden_layers": 4,
        "num_attention_heads": 12,
        "intermediate_size": 1248,
        "vocab_size": 40000,
        "max_position_embeddings": 512,
    }


def test_an_unknown_engine_is_refused(capsys):
    with pytest.raises(SystemExit):
        embed.main(["--peer-engines", "torch,tensorrt"])
    assert "unknown engine(s) tensorrt" in capsys.readouterr().err


def _results(record: dict):
    return lambda name: record


def test_the_committed_results_file_has_every_cell_and_its_section_renders():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    cells = {(r["way"], r["engine"], r["batch"], r["concurrency"]) for r in record["best"]}
    assert {("in-process", None, b, None) for b in embed.BATCHES} | {
        (way, None, None, c) for way in ("grpc", "grpc_mbs1") for c in embed.CONCURRENCY
    } <= cells
    assert record["model"]["max_batch_size"][NAME_MBS1] == 1 < record["model"]["max_batch_size"][NAME]
    assert all(r["texts"] > 0 and r["texts_per_s"] > 0 and r["p50_ms"] <= r["p99_ms"] for r in record["best"])
    assert record["ratios"] == embed.ratios(record["best"])
    assert record["facts"]["grpc_min_cosine"] >= 0.99999 and record["facts"]["grpc_mbs1_min_cosine"] >= 0.99999
    lines = page_embed.embeddings(_results(record))
    assert lines[0] == "## Embeddings" and "\n| gRPC c8 |" in "\n".join(lines)
    assert "\n| gRPC (max batch size 1) c8 |" in "\n".join(lines)


def test_the_section_renders_without_the_peer():
    record = json.loads(RECORD.read_text(encoding="utf-8"))
    bare = copy.deepcopy(record)
    bare["best"] = [r for r in bare["best"] if r["way"] != "peer"]
    bare["rows"] = [r for r in bare["rows"] if r["way"] != "peer"]
    bare["ratios"] = embed.ratios(bare["best"])
    bare["peer"], bare["skipped"] = {}, {"peer": "no --peer-python"}
    bare["facts"].pop("peer", None)
    text = "\n".join(page_embed.embeddings(_results(bare)))
    assert "infinity-emb (" not in text and "peer: skipped, no --peer-python" in text
