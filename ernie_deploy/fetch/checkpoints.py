"""Checkpoints: a URL pinned by sha256, a local archive or a local folder -> the model found in it.

- `inspect_checkpoint`: tell a PaddleNLP dygraph checkpoint from a Paddle static inference model, and check that
  its vocab.txt fits the model's embedding table.
- `resolve_checkpoint`: a URL, a local archive or a local folder -> `Checkpoint`.
- `Checkpoint.model_config`, `.max_positions`, `.do_lower_case`: what later stages read from the checkpoint's
  config.json and tokenizer_config.json.

The `--bootstrap` source (training a small model offline) is ernie_deploy.train.bootstrap.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from ernie_deploy.core.errors import BadCheckpointError, BadOptionsError, DownloadError, ErnieDeployError
from ernie_deploy.core.paths import cache_dir
from ernie_deploy.fetch.archives import archive_format, safe_extract
from ernie_deploy.fetch.downloads import download, normalize_sha256, sha256_file

DYGRAPH_CONFIGS = ("model_config.json", "config.json")
DYGRAPH_PARAMS = "model_state.pdparams"
VOCAB = "vocab.txt"
TOKENIZER_CONFIG = "tokenizer_config.json"  # PaddleNLP's tokenizer save_pretrained: do_lower_case lives here
# How many rows of the word embedding table a vocab.txt may leave unused. Released checkpoints pad the table a
# little past their vocabulary: ERNIE 1.0 has 17,964 tokens in vocab.txt and vocab_size 18,000 (0.2%). A vocab.txt
# of another model leaves far more (ERNIE 1.0's 18,000 tokens under ERNIE 3.0's 40,000 rows: 55%).
VOCAB_PADDING = 0.01
STATIC_PREFIXES = ("inference", "model")  # preferred, in order, when a folder holds several
_EXPECTED = (
    "expected either a PaddleNLP dygraph checkpoint (model_config.json or config.json, "
    "model_state.pdparams, vocab.txt) or a Paddle static inference model (PREFIX.json + PREFIX.pdiparams "
    "from Paddle 3, or PREFIX.pdmodel + PREFIX.pdiparams, usually with PREFIX inference or model; "
    "vocab.txt in the same folder or its parent)"
)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadCheckpointError(
            f"cannot read {path}: {exc}", "replace it with the file saved with the model"
        ) from None
    if not isinstance(data, dict):
        raise BadCheckpointError(f"{path} holds no JSON object", "replace it with the file saved with the model")
    return data


def read_model_config(path: str | Path) -> dict:
    """A PaddleNLP model config's arguments: config.json as is; the old model_config.json nests them under
    init_args."""
    config = _read_json(Path(path))
    if "init_args" in config and isinstance(config["init_args"], list) and config["init_args"]:
        return config["init_args"][0]
    return config


def count_lines(path: Path) -> int:
    """Tokens in a vocab.txt: one per line, its id the line number (as paddlenlp reads it)."""
    with open(path, "rb") as fh:
        data = fh.read()
    return data.count(b"\n") + (0 if not data or data.endswith(b"\n") else 1)


def check_vocab_size(vocab: Path, config_file: Path | None) -> None:
    """Refuse a vocab.txt that does not belong to the model: more tokens than its embedding table has rows (their
    ids have no row), or so many fewer that it is another model's vocabulary (see VOCAB_PADDING)."""
    if config_file is None:
        return
    try:
        size = read_model_config(config_file).get("vocab_size")
    except ErnieDeployError:
        return  # an unreadable config is reported by the stage that needs it (export), with its own fix
    if not isinstance(size, int) or size <= 0:
        return
    tokens = count_lines(vocab)
    if tokens > size:
        why = f"ids {size:,} to {tokens - 1:,} have no row in the model's embedding table"
    elif tokens < size * (1 - VOCAB_PADDING):
        why = f"{size - tokens:,} rows of the embedding table would never be used: it is another model's vocabulary"
    else:
        return
    raise BadCheckpointError(
        f"{vocab} has {tokens:,} tokens but {config_file.name} says vocab_size {size:,}: {why}",
        f"use the {VOCAB} saved with this model (save_pretrained writes both), or the config.json of the model "
        f"this {VOCAB} belongs to",
    )


@dataclass(frozen=True)
class Checkpoint:
    """A model to deploy, as found on disk."""

    kind: str  # "dygraph" (PaddleNLP save_pretrained) or "static" (Paddle inference model)
    root: Path  # the folder holding the weights
    params_file: Path  # model_state.pdparams | PREFIX.pdiparams
    vocab_file: Path
    config_file: Path | None = None  # model_config.json / config.json (static: if one lies beside it)
    model_file: Path | None = None  # static only: PREFIX.json (PIR) or PREFIX.pdmodel (legacy)
    # tokenizer_config.json, beside the weights or the vocab.txt. Not part of a checkpoint's identity: it only
    # says how to tokenize, which `do_lower_case` reads from it.
    tokenizer_config_file: Path | None = field(default=None, compare=False)

    def model_config(self) -> dict:
        """The model's config.json arguments ({} when the checkpoint has none)."""
        return read_model_config(self.config_file) if self.config_file else {}

    @property
    def heads(self) -> list[str]:
        """The paddlenlp classes the checkpoint's config says it was saved from (`architectures`, or the older
        `init_class`); [] where it says none."""
        config = self.model_config()
        heads = config.get("architectures") or ([config["init_class"]] if config.get("init_class") else [])
        return [str(head) for head in heads] if isinstance(heads, list) else []

    @property
    def max_positions(self) -> int | None:
        """The longest input the model takes, in tokens (max_position_embeddings); None when no config says."""
        value = self.model_config().get("max_position_embeddings")
        return int(value) if value else None

    @property
    def do_lower_case(self) -> bool:
        """Whether the tokenizer lowercases and strips accents (tokenizer_config.json; ERNIE's default: yes)."""
        if self.tokenizer_config_file is None:
            return True
        return bool(_read_json(self.tokenizer_config_file).get("do_lower_case", True))

    @property
    def static_format(self) -> str | None:
        """ "pir" (PREFIX.json) or "legacy" (PREFIX.pdmodel); None for dygraph checkpoints."""
        if self.model_file is None:
            return None
        return "pir" if self.model_file.suffix == ".json" else "legacy"

    @property
    def prefix(self) -> Path | None:
        """Static models: the path prefix Paddle loads (root/inference); None for dygraph."""
        return self.model_file.with_suffix("") if self.model_file is not None else None

    def describe(self) -> str:
        files = [self.model_file, self.params_file, self.config_file, self.vocab_file]
        names = ", ".join(str(f.relative_to(self.root)) if f.parent == self.root else str(f) for f in files if f)
        kind = f"static ({self.static_format})" if self.kind == "static" else "dygraph"
        return f"{kind} checkpoint at {self.root}: {names}"


def inspect_checkpoint(path: str | Path) -> Checkpoint:
    """Detect the checkpoint layout at `path` (a folder).

    When the folder itself holds no layout, a single subfolder is looked into: always when it is the
    only entry (an archive's top-level folder), and also when it sits beside loose files (a static
    `export/` beside the tokenizer's vocab.txt).

    A folder with a complete dygraph layout wins over a static model in the same folder (the
    dygraph weights are the source the static model is exported from). ErnieDeployError lists what
    was found and what is expected when no layout matches, and names the missing file when a layout
    is incomplete (e.g. a static model without vocab.txt).
    """
    path = Path(path)
    if not path.exists():
        raise BadCheckpointError(f"no such checkpoint: {path}", _EXPECTED)
    if not path.is_dir():
        raise BadCheckpointError(
            f"{path} is a file, not a checkpoint folder",
            "pass the folder; archives are unpacked by resolve_checkpoint (or the CLI's --checkpoint)",
        )
    return _inspect_folder(path, path)


def _inspect_folder(root: Path, top: Path) -> Checkpoint:
    found = _detect(root)
    if found is not None:
        return found
    entries = _visible(root)
    subdirs = [e for e in entries if e.is_dir()]
    inner = ""
    if len(subdirs) == 1:
        if len(entries) == 1:
            # An archive's single top-level folder (or a chain of them): look inside.
            return _inspect_folder(subdirs[0], top)
        # One folder beside loose files (e.g. vocab.txt beside export/): try it, else report here.
        try:
            return _inspect_folder(subdirs[0], top)
        except ErnieDeployError as exc:
            inner = f"; in {subdirs[0].name}/: {exc.problem}"
    listing = ", ".join(e.name + ("/" if e.is_dir() else "") for e in entries[:30]) or "nothing"
    if len(entries) > 30:
        listing += f", ... ({len(entries)} entries)"
    where = str(root) if root == top else f"{root} (inside {top})"
    fix = _EXPECTED
    names = [e.name for e in entries]
    sharded = any(n.endswith(".safetensors") or re.match(r"model_state-.*\.pdparams$", n) for n in names)
    configs = [n for n in DYGRAPH_CONFIGS if n in names]
    if configs and not sharded:
        raise BadCheckpointError(
            f"{where} has {configs[0]} but no weights: no {DYGRAPH_PARAMS}, and no static model "
            f"(PREFIX.json or PREFIX.pdmodel with PREFIX.pdiparams){inner}",
            f"copy the {DYGRAPH_PARAMS} saved with this config into the folder (model.save_pretrained writes both), "
            "or point at the folder that holds the weights",
        )
    if sharded:
        fix += (
            "; safetensors or sharded weights are not supported: re-save with "
            "save_pretrained(..., safe_serialization=False) into a single model_state.pdparams"
        )
    raise BadCheckpointError(f"no checkpoint layout recognized in {where}; found: {listing}{inner}", fix)


def _visible(folder: Path) -> list[Path]:
    """Entries that matter: no dotfiles, no __MACOSX resource forks."""
    return sorted(e for e in folder.iterdir() if not e.name.startswith(".") and e.name != "__MACOSX")


def _first(*candidates: Path) -> Path | None:
    return next((c for c in candidates if c.is_file()), None)


def _detect(root: Path) -> Checkpoint | None:
    dygraph = _detect_dygraph(root)
    if dygraph is not None:
        return dygraph
    return _detect_static(root)


def _detect_dygraph(root: Path) -> Checkpoint | None:
    params = root / DYGRAPH_PARAMS
    if not params.is_file():
        return None
    config = _first(*(root / name for name in DYGRAPH_CONFIGS))
    vocab = _first(root / VOCAB)
    missing = [label for label, got in (("model_config.json or config.json", config), (VOCAB, vocab)) if not got]
    if missing:
        raise BadCheckpointError(
            f"{root} has {DYGRAPH_PARAMS} but lacks {' and '.join(missing)}",
            "a PaddleNLP dygraph checkpoint needs model_config.json (or config.json), model_state.pdparams "
            "and vocab.txt in one folder (save both model and tokenizer with save_pretrained)",
        )
    check_vocab_size(vocab, config)
    return Checkpoint(
        "dygraph",
        root,
        params_file=params,
        vocab_file=vocab,
        config_file=config,
        tokenizer_config_file=_first(root / TOKENIZER_CONFIG),
    )


def _detect_static(root: Path) -> Checkpoint | None:
    pairs: dict[str, Path] = {}
    for params in sorted(root.glob("*.pdiparams")):
        stem = params.name[: -len(".pdiparams")]
        model = _first(root / f"{stem}.json", root / f"{stem}.pdmodel")  # Paddle 3 PIR first
        if model is not None and params.is_file():
            pairs[stem] = model
    if not pairs:
        return None
    stem = next((p for p in STATIC_PREFIXES if p in pairs), None)
    if stem is None:
        if len(pairs) > 1:
            raise BadCheckpointError(
                f"{root} holds several static models ({', '.join(sorted(pairs))}); which one is meant is unclear",
                f"keep one, or name it with the prefix {' or '.join(STATIC_PREFIXES)}",
            )
        stem = next(iter(pairs))
    model = pairs[stem]
    vocab = _first(root / VOCAB, root.parent / VOCAB)
    if vocab is None:
        raise BadCheckpointError(
            f"static model {model.name} + {stem}.pdiparams found in {root}, but no {VOCAB} in it or in {root.parent}",
            f"place the tokenizer's {VOCAB} next to the model files (or in the folder above)",
        )
    config = _first(*(d / name for d in (root, root.parent) for name in ("config.json", "model_config.json")))
    check_vocab_size(vocab, config)
    return Checkpoint(
        "static",
        root,
        params_file=root / f"{stem}.pdiparams",
        vocab_file=vocab,
        config_file=config,
        model_file=model,
        tokenizer_config_file=_first(root / TOKENIZER_CONFIG, vocab.parent / TOKENIZER_CONFIG),
    )


def is_url(source: str) -> bool:
    """Whether a checkpoint source is an http(s) URL (downloaded, sha256-verified) rather than a local path."""
    return urlparse(str(source)).scheme.lower() in ("http", "https")


def resolve_checkpoint(source: str, *, sha256: str | None = None, workdir: str | Path) -> Checkpoint:
    """Turn a checkpoint source into a `Checkpoint`.

    - http(s) URL of an archive: `sha256` is required; it is downloaded to
      `cache_dir()/downloads/<sha256>/<name>` and unpacked to `cache_dir()/extracted/<sha256>`, both
      reused on later calls.
    - local archive: checked against `sha256` when given, unpacked to `workdir/extracted/<its sha256>`
      (reused while the archive is unchanged).
    - local folder: inspected in place (`sha256` cannot apply to a folder and is refused).
    """
    source = str(source)
    parsed = urlparse(source)
    if is_url(source):
        if not sha256:
            raise BadOptionsError(
                f"the checkpoint URL {source} has no pinned sha256",
                "pass its sha256 (--sha256 HEX; `sha256sum FILE` on a trusted copy): downloads are always verified",
            )
        digest = normalize_sha256(sha256)
        archive = download(source, digest, cache_dir() / "downloads" / digest / _url_filename(parsed.path))
        return _inspect_archive(archive, cache_dir() / "extracted" / digest)
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", source):
        raise BadOptionsError(
            f"unsupported checkpoint source {source!r}", "use an http(s) URL, a local folder or a local archive"
        )
    path = Path(source).expanduser()
    if path.is_dir():
        if sha256:
            raise BadOptionsError(
                f"a sha256 was given for the folder {path}; only URLs and archives can be verified",
                "drop --sha256, or point at the archive instead of the unpacked folder",
            )
        return inspect_checkpoint(path)
    if path.is_file():
        archive_format(path)  # refuse non-archives with a clear message before hashing
        digest = sha256_file(path)
        if sha256 and digest != normalize_sha256(sha256):
            raise DownloadError(
                f"sha256 mismatch for {path}: expected {normalize_sha256(sha256)}, got {digest}",
                "the archive is not the pinned release; fetch it again or fix the pinned sha256",
            )
        return _inspect_archive(path, Path(workdir) / "extracted" / digest)
    raise BadCheckpointError(
        f"no such checkpoint: {source}",
        "pass an http(s) URL with --sha256, a local checkpoint folder, or a .tar.gz/.tgz/.tar/.zip archive",
    )


def _url_filename(url_path: str) -> str:
    """A safe local file name from a URL path (`.../ernie-3.0-mini.tar.gz` -> `ernie-3.0-mini.tar.gz`)."""
    name = unquote(posixpath.basename(url_path.rstrip("/")))
    name = re.sub(r"[^A-Za-z0-9._+-]", "_", name).lstrip(".")
    return name or "download"


def _inspect_archive(archive: Path, out: Path) -> Checkpoint:
    # safe_extract renames into place only when complete, so an existing folder is a whole one.
    if not out.is_dir():
        safe_extract(archive, out)
    return inspect_checkpoint(out)


# A bootstrap checkpoint's record of its training (train.bootstrap writes it beside the weights).
TRAINING_RECORD = "bootstrap.json"
# The key of a checkpoint's config.json that holds the input length it was trained at, where its training wrote one
# (paddlenlp's own configs hold none).
CONFIG_MAX_SEQ_LEN = "max_seq_len"


def training_record(root: str | Path) -> dict:
    """The training record beside the checkpoint at `root`; {} where it has none, or one that cannot be read."""
    path = Path(root) / TRAINING_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


def _length(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def trained_tokens(root: str | Path) -> int | None:
    """The token length of the texts the checkpoint at `root` was trained on ([CLS] and [SEP] included), where its
    training record says (a bootstrap checkpoint records its own: `trained_tokens`); None where nothing says."""
    return _length(training_record(root).get("trained_tokens"))


def trained_max_seq_len(root: str | Path, config: dict) -> int | None:
    """The input length in tokens the checkpoint at `root` was trained at, where it says: its training record's recipe
    (`max_seq_len`, which the bootstrap records), else its config's CONFIG_MAX_SEQ_LEN; None where nothing says."""
    recipe = training_record(root).get("recipe")
    return _length(recipe.get("max_seq_len") if isinstance(recipe, dict) else None) or _length(
        config.get(CONFIG_MAX_SEQ_LEN)
    )
