"""`python -m benchmarks.page`: docs/BENCHMARKS.md written whole from the results files in docs/, the latest run of
each benchmark; `--check` writes nothing and exits 1 when the page is not what the files give
(tests/test_benchmarks_report.py runs it, so a results file and the page cannot drift apart).

The page is a fixed skeleton per section (what is measured, how, the command, how to read it: the text in the
benchmarks/page_*.py modules) around tables and figures computed from the results files. A section reports one
benchmark's latest run, the one its results file holds; a results file reported on another page, or superseded by a
later file of the same command, is named at the end (ELSEWHERE, SUPERSEDED) so that every file in docs/ has a home.

    page_parts.py    the results files read, a run's command, machine and load, tables
    page_run.py      the main run (docs/bench.json): its marked block, the targets, the layout, sizes, INT8, tune
    page_levers.py   levers, overload, the response cache
    page_lone.py     a lone request's path through the fused classifier, part by part, before and after
    page_gateway.py  the HTTP gateway, pinned, on the tiny classifier, its phases, refused bodies
    page_uie.py      information extraction (UIE): the demo and nano runs
    page_served.py   monitoring, every label's probability, shadow evaluation, the load generators
    page_embed.py    embed models against their in-process limit and against infinity-emb
    page_uie_int8.py the demo UIE in static INT8 against FP32
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from benchmarks import page_embed, page_gateway, page_levers, page_lone, page_run, page_served, page_uie, page_uie_int8
from benchmarks.page_parts import Results, anchor, table, wrap
from ernie_deploy.core.files import atomic_path

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGE = "BENCHMARKS.md"

# (heading, level, section): in the page's order.
SECTIONS = (
    ("The main run", 2, page_run.main_run),
    ("Targets: where they stand, and why", 2, page_run.targets_why),
    ("The default layout", 2, page_run.default_layout),
    ("Sizes: which one to pick", 2, page_run.sizes_pick),
    ("INT8: static vs dynamic scales", 2, page_run.int8),
    ("Tune a model on your machine", 2, page_run.tune),
    ("Levers", 2, page_levers.levers),
    ("A lone request's path", 2, page_lone.lone_request),
    ("Overload", 2, page_levers.overload),
    ("Response cache", 2, page_levers.cache),
    ("HTTP gateway", 2, page_gateway.gateway),
    ("Pinned", 3, page_gateway.pinned),
    ("The test suite's tiny classifier", 3, page_gateway.tiny),
    ("Where a lone request's time goes", 3, page_gateway.profile),
    ("Refused bodies", 3, page_gateway.refused_bodies),
    ("Information extraction (UIE)", 2, page_uie.information_extraction),
    ("UIE in INT8", 3, page_uie_int8.uie_int8),
    ("Embeddings", 2, page_embed.embeddings),
    ("Monitoring", 2, page_served.monitoring),
    ("Every label's probability: its cost to clients that do not ask", 2, page_served.scores_cost),
    ("Shadow evaluation", 2, page_served.shadow),
    ("Load generators", 2, page_served.load_generators),
)

# Results files whose figures live on another page (that page is their one home).
ELSEWHERE = {
    "first_runs.json": "[README.md](../README.md): the first run on a clean clone, and the test suite's time",
    "input_cost.json": "[RELIABILITY.md](RELIABILITY.md#bounded-cost-per-request): one text's time and memory by "
    "its length (`bash scripts/bench.sh input-cost`)",
    "long_texts.json": "[LONG_TEXTS.md](LONG_TEXTS.md#measured): NER on documents, cut and in windows "
    "(`bash scripts/bench.sh long-texts`)",
    "long_texts_demo.json": "[LONG_TEXTS.md](LONG_TEXTS.md#options): the shipped tagger on documents, by window size",
    "head_tail_sentences.json": "[LONG_TEXTS.md](LONG_TEXTS.md#classifiers-headtail-at-sentence-boundaries): "
    "head+tail cuts of long classifier inputs",
    "soak.json": "[RELIABILITY.md](RELIABILITY.md#load): `ernie-deploy soak`, good and bad requests under load",
    "soak-chaos.json": "[RELIABILITY.md](RELIABILITY.md#load): the soak with python stubs killed under it",
    "soak-all-kinds.json": "[RELIABILITY.md](RELIABILITY.md#load): the soak on a repository of all four kinds",
    "rollout-soak.json": "[RELIABILITY.md](RELIABILITY.md#versions-and-rollout): the soak through a rollout",
}
# A results file of the same command as a later one: the page keeps the later run only.
SUPERSEDED = {"levers-spinning-1.json": "levers-spinning-2.json"}

INTRO = """\
What this repository's benchmarks measure, and the latest run of each: the command that makes it, the machine and
its load as the run's results file records them, what is compared against what, and the ratios measured within
that run. Every table and figure below is written from the results files in docs/ by `python -m benchmarks.page`
(benchmarks/page.py); `python -m benchmarks.page --check` exits 1 when this page is not what the files give, and
tests/test_benchmarks_report.py runs it. A benchmark writes its results file; `python -m benchmarks.page` then
writes this page. To time your own served model against its in-process limit on your machine, run
`ernie-deploy bench --model NAME` (it writes `artifacts/reports/bench/`, never this page)."""


def _machines(results: Results, names: list[str]) -> str:
    """The machines the runs name, as one sentence."""
    seen = {}
    for name in names:
        m = results(name).get("machine")
        if m:
            seen[(m["cpu"], m["cores"], m["usable_cores"], m["memory_gib"])] = True
    text = "; ".join(f"{cpu}, {cores} cores ({usable} usable), {gib} GiB" for cpu, cores, usable, gib in seen)
    one = "one machine" if len(seen) == 1 else f"{len(seen)} machines"
    return (
        f"The runs below are on {one}: {text}, shared with other work, so each run's load average stands beside its "
        "figures, and the ratios to read are those within a run, not rates across runs."
    )


def _date(record: dict) -> str:
    # gateway-profile.json gathers runs of its own, the one it reports under "after"
    date = record.get("date") or record.get("after", {}).get("date")
    return date[:10] if date else "not recorded"


def render_page(docs: str | Path = DOCS) -> str:
    """The whole page from the results files in `docs`."""
    return render(Results(docs))


def render(results: Results) -> str:
    """The whole page from `results` (its `read` then names every results file the page reports)."""
    body, index, fed = [], [], []
    for heading, level, section in SECTIONS:
        results.accessed.clear()
        lines = section(results)
        assert lines[0] == "#" * level + " " + heading, f"{section.__name__} starts with {lines[0]!r}"
        files = list(dict.fromkeys(results.accessed))
        fed += files
        link = f"[{heading}](#{anchor(heading)})"
        index.append(
            [
                link if level == 2 else f"· {link}",
                ", ".join(f"docs/{f}" for f in files) or "none",
                ", ".join(dict.fromkeys(_date(results(f)) for f in files)) or "–",
            ]
        )
        body += ["", *lines]
    results.accessed.clear()
    lines = ["# Benchmarks", "", INTRO, "", wrap(_machines(results, list(dict.fromkeys(fed)))), ""]
    lines += table(["section", "results file", "run (UTC)"], index, "lll")
    lines += body
    lines += ["", "## Results files reported elsewhere", ""]
    items = [f"- docs/{name}: {where}" for name, where in ELSEWHERE.items()]
    for old, new in SUPERSEDED.items():
        items.append(
            f"- docs/{old}: the same command as docs/{new}, run on {_date(results(old))} at "
            f"{results(old)['date'][11:16]} against {results(new)['date'][11:16]} UTC; a section reports the latest "
            "run only."
        )
    lines.append(wrap("\n".join(items)))
    return "\n".join(lines) + "\n"


def check(docs: str | Path = DOCS, page: str | Path | None = None) -> list[str]:
    """The unified diff of the page on disk against what the results files give; empty when they agree."""
    path = Path(page or Path(docs) / PAGE)
    written = path.read_text(encoding="utf-8") if path.exists() else ""
    wanted = render_page(docs)
    return list(difflib.unified_diff(written.splitlines(), wanted.splitlines(), str(path), "rendered", lineterm=""))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.page", description=__doc__.split("\n\n")[0], allow_abbrev=False
    )
    p.add_argument("--docs", default=str(DOCS), help="the folder of the results files (default: docs/)")
    p.add_argument("--out", help="the page to write or check (default: BENCHMARKS.md in --docs)")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the page differs")
    args = p.parse_args(argv)
    path = Path(args.out or Path(args.docs) / PAGE)
    if args.check:
        diff = check(args.docs, path)
        if diff:
            print(f"{path} is not what the results files give; run `python -m benchmarks.page`:", file=sys.stderr)
            print("\n".join(diff[:60]), file=sys.stderr)
            return 1
        print(f"{path} is what the results files give")
        return 0
    with atomic_path(path, suffix=".md") as tmp:
        tmp.write_text(render_page(args.docs), encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
