"""Prometheus rules for what the served models answer (deploy/prometheus/drift.yml): the live share of every profile
bucket over a window, its Jensen-Shannon divergence from the model's reference profile, the share of low-confidence
answers against the reference's, and alerts on answers drifting, confidence collapsing and text lengths shifting.

The rules are data built here, so a test can ask for a window of seconds (tests/test_drift_served.py) and the shipped
file is this module's output with the defaults (tests/test_prometheus.py checks that):
    python -m ernie_deploy.deployfiles.drift_rules                       # rewrites deploy/prometheus/drift.yml
    python -m ernie_deploy.deployfiles.drift_rules --window 2h --for 30m --min-texts 500 --out my-drift.yml

Why Jensen-Shannon and not PSI: a bucket empty on one side makes PSI infinite, while JS stays within 0..1 (log base 2),
so one threshold serves every model and bucket count. Both shares are clamped at EPSILON so that an empty bucket adds
0 (the limit of p * log p) instead of NaN.

The threshold numbers below were measured on the demo classifier's data (THUCNews, 10 classes; the reference's source
is its dev split, every class at 10 %): 2,000 random draws of N test-split texts against the dev split's shares gave
label JS median / p99 / max of 0.006 / 0.016 / 0.021 at N = 200 and 0.014 / 0.037 / 0.057 at N = 100, and chars JS
p99 0.006 at N = 200 (noise, no drift); one class growing from 10 % to 37 % of the answers reads 0.077, answers of
one class only 0.76, and MSRA's sentences (longer than news titles) against the titles' lengths 0.44.
"""

from __future__ import annotations

import argparse
import os
import re
import textwrap
from pathlib import Path

import yaml

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.files import atomic_path
from ernie_deploy.core.profile import (
    CHARS,
    CONFIDENCE,
    ENTITY_TYPE,
    LABEL,
    LABELS_PER_TEXT,
    LOW_CONFIDENCE_BUCKETS,
    PROFILE_METRIC,
    REFERENCE_METRIC,
    TEXTS_METRIC,
)

DEFAULT_OUT = Path("deploy") / "prometheus" / "drift.yml"
# 30 minutes: long enough that a service answering one text every 9 s still gathers MIN_TEXTS, short enough that a
# drift shows within the hour (with ALERT_FOR), and wide enough to smooth the minute-to-minute mix of a live stream.
# A service with much less traffic needs a longer window (--window), one with much more can take a shorter one.
DEFAULT_WINDOW = "30m"
# A drift must hold this long before it pages: a burst of one client's odd texts is not a change of the stream.
DEFAULT_FOR = "10m"
# Fewer texts than this in the window and no drift alert fires: at 200 texts sampling noise alone reads label JS of
# at most 0.021 (measured above), a fifth of ANSWER_JS; at 100 it reaches 0.057.
DEFAULT_MIN_TEXTS = 200
# Label shares drifting: 0.1 is five times the largest JS that 200 texts of an unchanged stream read, and about one
# class growing from 10 % to 40 % of the answers, or half the classes no longer answered (0.31).
ANSWER_JS = 0.1
# Text lengths shifting: the same bound; news titles against MSRA's sentences read 0.44, noise at 200 texts 0.006.
CHARS_JS = 0.1
# Confidence collapsing: the share of answers in LOW_CONFIDENCE_BUCKETS 0.2 above the reference's (absolute). The
# binomial spread of a 10 % share over 200 texts is 0.021, so 0.2 is ten of them: the model is unsure of a fifth more
# of what it answers.
LOW_CONFIDENCE_RISE = 0.2
# The clamp of both shares: an empty bucket contributes EPSILON * log2(EPSILON / m), about 3e-8, instead of NaN.
EPSILON = 1e-9

ANSWER_SERIES = (LABEL, ENTITY_TYPE, LABELS_PER_TEXT)
RUNBOOK = "docs/OPERATIONS.md"
GROUP = "ernie-deploy-drift"
_KEYS = "model, version, series, bucket"
_ON = f"on ({_KEYS})"


def _matchers(selector: str, *more: str) -> str:
    given = ", ".join(m for m in (selector, *more) if m)
    return "{" + given + "}" if given else ""


def _duration(option: str, value: str) -> str:
    if not re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", value):
        raise BadOptionsError(f"{option} {value!r} is not a Prometheus duration", "give one like 30s, 30m or 2h")
    return value


def live_share(window: str, selector: str = "") -> str:
    """Each bucket's share of its series over `window`, per (model, version, series, bucket), summed over servers;
    a series with no count in the window has no share (not 0/0)."""
    counts = f"increase({PROFILE_METRIC}{_matchers(selector)}[{window}])"
    # `group_left ()` with its (empty) label list: a bare group_left would read the parenthesis after it as one.
    total = f"(sum by (model, version, series) ({counts}) > 0)"
    return f"sum by ({_KEYS}) ({counts})\n/ ignoring (bucket) group_left ()\n{total}"


def reference_share(selector: str = "", *more: str) -> str:
    """The reference's shares, one per (model, version, series, bucket) however many servers export them."""
    return f"max by ({_KEYS}) ({REFERENCE_METRIC}{_matchers(selector, *more)})"


def js_divergence(live: str, reference: str) -> str:
    """Jensen-Shannon divergence (log base 2: 0..1) per (model, version, series) of the shares `live` and
    `reference` (expressions with the labels model, version, series, bucket)."""
    p = f"clamp_min({live}, {EPSILON:g})"
    q = f"clamp_min({reference}, {EPSILON:g})"
    both = f"({p}\n      + {_ON} {q})"
    return (
        "sum by (model, version, series) (\n"
        f"    0.5 * {p} * {_ON}\n    log2(2 * {p} / {_ON}\n      {both})\n"
        f"  + {_ON}\n"
        f"    0.5 * {q} * {_ON}\n    log2(2 * {q} / {_ON}\n      {both})\n"
        ")"
    )


def low_buckets() -> str:
    """The matcher of LOW_CONFIDENCE_BUCKETS (a regex: their dots escaped)."""
    return 'bucket=~"' + "|".join(b.replace(".", "\\\\.") for b in LOW_CONFIDENCE_BUCKETS) + '"'


def low_confidence(share: str) -> str:
    """The share of answers in LOW_CONFIDENCE_BUCKETS per (model, version), of a shares expression over the
    confidence series."""
    return f"sum by (model, version) ({share})"


def texts(window: str, selector: str = "") -> str:
    return f"sum by (model, version) (increase({TEXTS_METRIC}{_matchers(selector)}[{window}]))"


def names(window: str = DEFAULT_WINDOW) -> dict[str, str]:
    """The recorded series' names for `window`."""
    return {
        "share": f"ernie_deploy:profile_share:{window}",
        "js": f"ernie_deploy:drift_js:{window}",
        "low": f"ernie_deploy:low_confidence_share:{window}",
        "reference": "ernie_deploy:reference_share",
        "reference_low": "ernie_deploy:reference_low_confidence_share",
        "texts": f"ernie_deploy:texts:{window}",
    }


def _anchor(alert: str) -> str:
    """The runbook's section for an alert: ErnieDeployAnswerDrift -> #ernie-deploy-answer-drift."""
    return "#" + re.sub(r"(?<!^)(?=[A-Z])", "-", alert).lower()


def drift_rules(
    window: str = DEFAULT_WINDOW,
    alert_for: str = DEFAULT_FOR,
    min_texts: int = DEFAULT_MIN_TEXTS,
    answer_js: float = ANSWER_JS,
    chars_js: float = CHARS_JS,
    low_confidence_rise: float = LOW_CONFIDENCE_RISE,
) -> dict:
    """The rule file as data (what yaml.safe_load of drift.yml gives)."""
    window = _duration("--window", window)
    alert_for = _duration("--for", alert_for)
    if int(min_texts) < 1:
        raise BadOptionsError(f"--min-texts {min_texts} is below 1", "give the fewest texts a window needs, e.g. 200")
    n = names(window)
    enough = f"and on (model, version) {n['texts']} >= {int(min_texts)}"
    confidence = f'series="{CONFIDENCE}", {low_buckets()}'
    answers = "|".join(ANSWER_SERIES)

    def alert(name: str, expr: str, summary: str, description: str) -> dict:
        return {
            "alert": name,
            "expr": expr,
            "for": alert_for,
            "labels": {"severity": "warning"},
            "annotations": {"summary": summary, "description": description, "runbook": RUNBOOK + _anchor(name)},
        }

    where = "{{ $labels.model }} v{{ $labels.version }}"
    rules = [
        {"record": n["share"], "expr": live_share(window)},
        # One reference share per bucket however many servers (pods) export it.
        {"record": n["reference"], "expr": reference_share()},
        {"record": n["js"], "expr": js_divergence(n["share"], n["reference"])},
        {"record": n["low"], "expr": low_confidence(f"{n['share']}{{{confidence}}}")},
        {"record": n["reference_low"], "expr": low_confidence(f"{n['reference']}{{{confidence}}}")},
        {"record": n["texts"], "expr": texts(window)},
        alert(
            "ErnieDeployAnswerDrift",
            f'{n["js"]}{{series=~"{answers}"}} > {answer_js:g}\n{enough}',
            f"{where}: its answers ({{{{ $labels.series }}}}) drifted from the reference, "
            f'JS {{{{ $value | printf "%.2f" }}}}',
            f"Over the last {window} the shares of its answers (series {{{{ $labels.series }}}}) differ from those of "
            f"its reference profile by a Jensen-Shannon divergence above {answer_js:g} (0: the same, 1: nothing in "
            "common). Either the texts sent changed (a new client, a new source) or the model no longer fits them: "
            "compare the live and reference shares on the dashboard, then retrain or rebuild the reference.",
        ),
        alert(
            "ErnieDeployConfidenceCollapse",
            f"{n['low']} - on (model, version) {n['reference_low']} > {low_confidence_rise:g}\n{enough}",
            f"{where}: low-confidence answers {{{{ $value | humanizePercentage }}}} above the reference",
            f"Over the last {window} the share of answers whose top confidence is under "
            f"{LOW_CONFIDENCE_BUCKETS[-1].split('-')[1]} rose more than {low_confidence_rise:g} above the reference's: "
            "the model is unsure of much more of what it is sent. Look at the texts it answers with low "
            "confidence (new topics, another language, broken input) and retrain on them if the stream changed.",
        ),
        alert(
            "ErnieDeployTextLengthShift",
            f'{n["js"]}{{series="{CHARS}"}} > {chars_js:g}\n{enough}',
            f'{where}: text lengths drifted from the reference, JS {{{{ $value | printf "%.2f" }}}}',
            f"Over the last {window} the lengths of the texts sent differ from the reference's by a Jensen-Shannon "
            f"divergence above {chars_js:g}: another kind of text is arriving (sentences where titles were, whole "
            "documents). Check the reading series (cut, windows) and whether the model was trained for such texts.",
        ),
    ]
    return {"groups": [{"name": GROUP, "rules": rules}]}


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)

_HEADER = """\
# Drift rules for what ernie-deploy's models answer, generated by ernie_deploy/deployfiles/drift_rules.py (the numbers
# behind each threshold are there): do not edit by hand, run
#   python -m ernie_deploy.deployfiles.drift_rules [--window 30m --for 10m --min-texts 200]
# Series read (exported by every answering step, ernie_deploy/core/profile.py): ernie_deploy_profile_total{{model,
# version, series, bucket}} (counters, created at 0 for every bucket), ernie_deploy_texts_total{{model, version}} and
# ernie_deploy_reference_share{{model, version, series, bucket}} (gauges, the reference profile built with the model).
# Recorded: the live share per bucket, its Jensen-Shannon divergence (log base 2, 0..1) from the reference per
# series, the low-confidence share live and in the reference, and the texts in the window (no alert below
# {min_texts}). Checked by `promtool check rules` and unit-tested by drift_test.yml (tests/test_prometheus.py).
"""
_WHY = (
    "enough texts at modest traffic (200 at one text every 9 s), a drift seen within the hour with 'for', and the "
    "minute-to-minute mix of a live stream smoothed out."
)


def render(window: str = DEFAULT_WINDOW, alert_for: str = DEFAULT_FOR, min_texts: int = DEFAULT_MIN_TEXTS) -> str:
    """drift.yml's text: a header saying where it comes from, then the rules."""
    rules = drift_rules(window, alert_for, min_texts)
    why = _WHY if window == DEFAULT_WINDOW else "chosen when the file was written."
    header = _HEADER.format(window=window, min_texts=int(min_texts))
    header += "".join(f"# {line}\n" for line in textwrap.wrap(f"Window {window}: {why}", 116))
    return header + yaml.dump(rules, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


def write(
    out: str | os.PathLike = DEFAULT_OUT,
    window: str = DEFAULT_WINDOW,
    alert_for: str = DEFAULT_FOR,
    min_texts: int = DEFAULT_MIN_TEXTS,
) -> Path:
    """Write the rules to `out` atomically; returns the path."""
    text = render(window, alert_for, min_texts)
    path = Path(out)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ernie_deploy.deployfiles.drift_rules", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="the rule file to write (default: %(default)s)")
    parser.add_argument("--window", default=DEFAULT_WINDOW, help="the window drift is measured over (%(default)s)")
    parser.add_argument("--for", dest="alert_for", default=DEFAULT_FOR, help="how long a drift holds (%(default)s)")
    parser.add_argument("--min-texts", type=int, default=DEFAULT_MIN_TEXTS, help="texts in the window (%(default)s)")
    args = parser.parse_args(argv)
    path = write(args.out, args.window, args.alert_for, args.min_texts)
    print(f"wrote {path}")
    print("Add it to rule_files in your prometheus.yml (deploy/prometheus/prometheus.yml does).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
