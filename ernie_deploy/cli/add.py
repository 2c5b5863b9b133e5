"""`ernie-deploy add`: a checkpoint of your own to a named, served model beside the others in a repository.

Fetch, export, convert and build in one run, every input checked before anything is written
(ernie_deploy.pipeline.add); `scripts/convert.sh --task T --model NAME --source DIR|URL` runs it."""

from __future__ import annotations

from ernie_deploy.cli.arguments import add_kind_exports, add_repository
from ernie_deploy.cli.inputs import MAX_SEQ_LEN_HELP, options_from
from ernie_deploy.core.io import IOS
from ernie_deploy.core.tasks import TASKS
from ernie_deploy.pipeline.add import add_model, check_new_model
from ernie_deploy.pipeline.options import QUANTIZE, ConvertOptions, ExportOptions, FetchOptions
from ernie_deploy.repository.options import AUTO, RUNTIMES, BuildOptions


def register(sub) -> None:
    p = sub.add_parser(
        "add",
        help="a checkpoint of your own to a named, served model beside the others: fetch, export, convert, build",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("--task", required=True, choices=sorted(TASKS), help="what the model's head does")
    p.add_argument(
        "--model", required=True, metavar="NAME", help="the model's name: its artifacts' folder and what clients call"
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--source",
        metavar="DIR|URL",
        help="a PaddleNLP save_pretrained folder, a Paddle static inference model's folder, an archive of either, "
        "or an http(s) URL of one (with --sha256)",
    )
    source.add_argument(
        "--bootstrap", action="store_true", help="the task's demo model (shipped with the repository), under this name"
    )
    p.add_argument(
        "--train", action="store_true", help="with --bootstrap: train it on this machine instead (see `fetch`)"
    )
    p.add_argument(
        "--budget", type=float, metavar="MINUTES", help="with --bootstrap: train for this many minutes (see `fetch`)"
    )
    p.add_argument("--sha256", metavar="HEX", help="with a URL: the archive's pinned sha256 (downloads are verified)")
    add_repository(p, "the repository the model joins; every other model in it stays byte for byte")
    p.add_argument(
        "--labels", metavar="FILE", help="a JSON list of the label names, for a checkpoint whose config has none"
    )
    p.add_argument("--max-seq-len", type=int, metavar="N", help=MAX_SEQ_LEN_HELP)
    add_kind_exports(p)
    p.add_argument(
        "--parity-data",
        metavar="FILE",
        help="a split file whose texts the parity gate runs (default: the task's test split; see `convert`)",
    )
    p.add_argument("--quantize", choices=list(QUANTIZE), help="serve an INT8 model (see `ernie-deploy convert`)")
    p.add_argument("--fp16", action="store_true", default=None, help="an FP16 model, for GPUs")
    p.add_argument("--runtime", choices=[AUTO, *RUNTIMES], help="the model step's runtime (see `ernie-deploy build`)")
    p.add_argument("--io", choices=IOS, help="the tensors clients send and read (see `ernie-deploy build`)")
    p.add_argument(
        "--max-batch-size",
        type=int,
        help="the most texts one Triton request holds, and one batch the dynamic batcher merges from requests; 1: "
        f"each request runs alone (see `ernie-deploy build`; default {BuildOptions().max_batch_size})",
    )
    p.set_defaults(func=run)


def run(args) -> None:

    new = check_new_model(
        args.task,
        args.model,
        options_from(FetchOptions, args),
        args.repository,
        export=options_from(ExportOptions, args),
        convert=options_from(ConvertOptions, args),
        build=options_from(BuildOptions, args),
    )
    add_model(new, log=lambda line: print(line, flush=True))
    print()
    print(new.next_steps())
