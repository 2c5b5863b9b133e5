"""The length a model is served at: `--max-seq-len N` through `scripts/convert.sh` and `ernie-deploy add` as through
`export`, and the default an export takes without it: the length the checkpoint records (its training record's
recipe, or its config.json), else its task's (128; UIE, Taskflow's 512), at most the model's positions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ernie_deploy.core.errors import BadOptionsError
from ernie_deploy.core.tasks import DEFAULT_MAX_SEQ_LEN, SEQ_CLS, TASKFLOW_MAX_SEQ_LEN, TOKEN_CLS, UIE
from ernie_deploy.export.static import choose_max_seq_len, default_max_seq_len
from ernie_deploy.fetch.checkpoints import TRAINING_RECORD, trained_max_seq_len
from ernie_deploy.pipeline.options import ExportOptions

# -- the flag, passed on (scripts/convert.sh's: tests/test_scripts.py) ----------------------------------------------


def test_add_fills_the_export_options_with_max_seq_len():
    from ernie_deploy.cli import build_parser
    from ernie_deploy.cli.inputs import options_from

    argv = ["add", "--task", "uie", "--model", "mine", "--source", "DIR", "--max-seq-len", "256"]
    assert options_from(ExportOptions, build_parser().parse_args(argv)) == ExportOptions(max_seq_len=256)
    assert options_from(ExportOptions, build_parser().parse_args(argv[:-2])) == ExportOptions()


def test_add_refuses_a_length_past_the_checkpoints_positions_before_writing(tmp_path):
    from ernie_deploy.pipeline.add import check_new_model
    from ernie_deploy.pipeline.options import FetchOptions

    checkpoint = _checkpoint(tmp_path / "ck", {"architectures": [SEQ_CLS.paddle_class], "num_labels": 2})
    with pytest.raises(BadOptionsError, match="max_seq_len 1024 is more than the model's 512 positions") as err:
        check_new_model(
            "seq_cls",
            "news",
            FetchOptions(source=str(checkpoint)),
            tmp_path / "models",
            export=ExportOptions(max_seq_len=1024),
        )
    assert "--max-seq-len 512 or less" in err.value.fix
    assert not (tmp_path / "models").exists()


# -- the default --------------------------------------------------------------------------------------------------


def _checkpoint(root: Path, config: dict, record: dict | None = None) -> Path:
    """A checkpoint's folder as inspect_checkpoint reads it (the weights' bytes are not read), with 512 positions."""
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"max_position_embeddings": 512, **config}))
    (root / "model_state.pdparams").write_bytes(b"")
    (root / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n[UNK]\n")
    if record is not None:
        (root / TRAINING_RECORD).write_text(json.dumps(record))
    return root


def test_a_uie_checkpoint_that_records_no_length_takes_taskflows_512_at_most_its_positions(tmp_path):
    root = _checkpoint(tmp_path / "uie", {"architectures": ["UIE"]})
    assert TASKFLOW_MAX_SEQ_LEN == 512 and UIE.default_max_seq_len == TASKFLOW_MAX_SEQ_LEN
    assert default_max_seq_len(UIE, root, {}) == 512
    assert choose_max_seq_len(None, 2048, default_max_seq_len(UIE, root, {})) == 512
    assert choose_max_seq_len(None, 256, default_max_seq_len(UIE, root, {})) == 256  # capped by its positions
    # the other tasks keep theirs
    assert default_max_seq_len(SEQ_CLS, root, {}) == default_max_seq_len(TOKEN_CLS, root, {}) == DEFAULT_MAX_SEQ_LEN


def test_a_checkpoint_that_records_its_length_is_served_at_it(tmp_path):
    # The offline bootstrap's record: its recipe's max_seq_len, 128, the length it trained at.
    bootstrap = _checkpoint(tmp_path / "bootstrap", {"architectures": ["UIE"]}, {"recipe": {"max_seq_len": 128}})
    assert trained_max_seq_len(bootstrap, {}) == 128
    assert default_max_seq_len(UIE, bootstrap, {}) == 128
    # A config that records one, where no training record does.
    bare = _checkpoint(tmp_path / "bare", {"architectures": ["UIE"]})
    assert default_max_seq_len(UIE, bare, {"max_seq_len": 384}) == 384
    assert default_max_seq_len(SEQ_CLS, bare, {"max_seq_len": 256}) == 256
    assert choose_max_seq_len(None, 256, default_max_seq_len(UIE, bare, {"max_seq_len": 384})) == 256
    # What records nothing usable is read as nothing.
    broken = _checkpoint(tmp_path / "broken", {}, {"recipe": {"max_seq_len": "long"}})
    assert trained_max_seq_len(broken, {"max_seq_len": 0}) is None
    (broken / TRAINING_RECORD).write_text("{not json")
    assert default_max_seq_len(UIE, broken, {}) == 512


def test_a_uie_checkpoint_exports_at_512_and_a_recorded_one_at_its_length(tmp_path):
    """Through export itself: a UIE checkpoint without a record at 512; the same model with the bootstrap's training
    record (recipe max_seq_len 128) beside it at 128."""
    from ernie_deploy.export.static import export
    from ernie_deploy.fetch.checkpoints import inspect_checkpoint

    from .test_task_recorded import tiny_uie

    checkpoint = tiny_uie(tmp_path / "uie")
    static = export(inspect_checkpoint(checkpoint), UIE, tmp_path / "static")
    assert (static.max_seq_len, static.max_positions) == (512, 512)
    # The exported program as a static checkpoint (no re-tracing), with the bootstrap's record and config beside it.
    recorded = tmp_path / "recorded"
    recorded.mkdir()
    for name in ("inference.json", "inference.pdiparams", "vocab.txt"):
        (recorded / name).write_bytes((static.root / name).read_bytes())
    (recorded / "config.json").write_bytes((checkpoint / "config.json").read_bytes())
    (recorded / TRAINING_RECORD).write_text(json.dumps({"task": "uie", "recipe": {"max_seq_len": 128}}))
    assert export(inspect_checkpoint(recorded), UIE, tmp_path / "static128").max_seq_len == 128
    assert export(inspect_checkpoint(recorded), UIE, tmp_path / "static256", max_seq_len=256).max_seq_len == 256
