"""The scores-cost bench's parts: the earlier source tree it builds from, the ratios read from its rounds, its
subcommand, and what the load generators name in a request. The served part is what `bash scripts/bench.sh
scores-cost` runs (docs/scores-cost.json)."""

from __future__ import annotations

import shutil

import pytest

from benchmarks.cli import build_parser, normalized
from benchmarks.scores_cost import BEFORE, LAYOUTS, VARIANTS, best, ratios, source_tree
from ernie_deploy.bench.load import named_outputs
from ernie_deploy.core.errors import ErnieDeployError
from ernie_deploy.core.spec import ModelSpec
from ernie_deploy.core.tasks import ON_REQUEST, TASKS


def _row(variant, layout, concurrency, round_, texts_per_s, p50):
    return {
        "variant": variant,
        "layout": layout,
        "concurrency": concurrency,
        "round": round_,
        "texts_per_s": texts_per_s,
        "p50_ms": p50,
    }


def test_ratios_read_best_rounds_and_rounds_paired():
    # before is fast in round 0 and slow in round 1; after is the other way round, by less
    speeds = {"before": (1000, 800), "after": (820, 850), "after, asked": (880, 700)}
    p50s = {"before": (2.0, 2.6), "after": (2.1, 2.4), "after, asked": (2.3, 2.9)}
    rows = [
        _row(variant, layout, concurrency, n, speeds[variant][n], p50s[variant][n])
        for variant in VARIANTS
        for layout in LAYOUTS
        for concurrency in (1, 8)
        for n in (0, 1)
    ]
    top = best(rows)
    assert top[("before", "fused", 8)]["round"] == 0 and top[("after", "fused", 8)]["round"] == 1
    by = {(r["layout"], r["variant"]): r for r in ratios(rows)}
    after = by[("fused", "after")]
    assert after["c8_throughput_ratio"] == pytest.approx(850 / 1000)
    assert after["c1_p50_added_ms"] == pytest.approx(2.4 - 2.0)
    # paired within rounds: 820/1000 and 850/800, their median
    assert after["c8_throughput_ratio_paired"] == pytest.approx((0.82 + 850 / 800) / 2)
    assert after["c1_p50_added_ms_paired"] == pytest.approx((0.1 - 0.2) / 2)
    assert after["before_c8_round_spread"] == pytest.approx(0.8)
    assert {r["variant"] for r in by.values()} == {"after", "after, asked"}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_source_tree_is_the_revisions_files_and_a_bad_revision_is_named(tmp_path):
    tree = source_tree("HEAD", tmp_path / "tree")
    assert (tree / "ernie_deploy" / "serving" / "triton_model.py").is_file()
    with pytest.raises(ErnieDeployError) as caught:
        source_tree("no-such-revision", tmp_path / "bad")
    assert "no-such-revision" in str(caught.value) and "--before" in caught.value.fix


def test_subcommand_parses_its_options():
    args = build_parser().parse_args(normalized(["scores-cost", "--rounds", "2", "--before", "HEAD~3"]))
    assert (args.rounds, args.before) == (2, "HEAD~3")
    assert build_parser().parse_args(normalized(["scores-cost"])).before is None  # the run then uses BEFORE
    assert BEFORE.endswith("^")


@pytest.mark.parametrize("task", ["seq_cls", "pair_cls", "multi_label", "token_cls"])
def test_load_requests_name_what_the_clients_name(task):
    model = ModelSpec.new(TASKS[task])
    plain = {o.name() for o in named_outputs(model)}
    assert plain == {o.name for o in model.wire.read_specs()}
    assert not plain & ON_REQUEST  # computed only for a client that asks
    asked = {o.name() for o in named_outputs(model, tuple(ON_REQUEST))}
    served = {o.name for o in model.wire.output_specs()}
    assert asked == plain | (ON_REQUEST & served)
