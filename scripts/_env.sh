# Sourced by the scripts: make .venv with the project installed (once), and put it first on PATH.
# EXTRAS (set before sourcing): the setup.cfg extras the script needs. The pipeline's scripts need `export,serve`
# (the default); scripts/test.sh asks for `dev`, which holds those and the test, lint and deployment-check tools,
# so a first quickstart does not download what only the tests use.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_BIN="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-export,serve}"
# Free disk an install needs where .venv and the caches go: the venv takes 2.1 GB (export,serve) to 2.4 GB (dev), the
# artifacts and cached models of the four tasks a few hundred MB.
MIN_FREE_GB="${ERNIE_DEPLOY_MIN_FREE_GB:-5}"

# The Python versions setup.cfg's python_requires allows (">=3.11,<3.14"), read from there: its one statement.
check_python() {
  local spec low high version
  spec=$(sed -n 's/^python_requires *= *//p' setup.cfg)
  low=$(sed -n 's/.*>= *\([0-9]*\.[0-9]*\).*/\1/p' <<< "$spec")
  high=$(sed -n 's/.*< *\([0-9]*\.[0-9]*\).*/\1/p' <<< "$spec")
  if ! version=$("$PYTHON_BIN" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
    echo "error: no Python at '$PYTHON_BIN'" >&2
    echo "  fix: install Python $low to below $high, or name one with PYTHON=/path/to/python3" >&2
    exit 2
  fi
  # versions compare as numbers: 3.11 -> 311, 3.9 -> 309
  as_number() { local major=${1%%.*} minor=${1#*.}; echo $((major * 100 + minor)); }
  if [ "$(as_number "$version")" -lt "$(as_number "$low")" ] || [ "$(as_number "$version")" -ge "$(as_number "$high")" ]; then
    echo "error: $PYTHON_BIN is Python $version; ernie-deploy needs Python $spec (setup.cfg's python_requires)" >&2
    echo "  fix: run it with a Python in that range: PYTHON=/path/to/python3.11 bash $0" >&2
    exit 2
  fi
}

check_disk() {
  local free_kb need_kb=$((MIN_FREE_GB * 1024 * 1024))
  free_kb=$(df -Pk "$ROOT" | awk 'NR == 2 {print $4}')
  if [ "$free_kb" -lt "$need_kb" ]; then
    echo "error: $((free_kb / 1024)) MB free on the disk of $ROOT; installing needs about $MIN_FREE_GB GB" \
      "(the venv 2.1-2.4 GB, data, artifacts and cached models)" >&2
    echo "  fix: free some space there, or clone the project onto a disk with more" >&2
    exit 2
  fi
}

if [ ! -x .venv/bin/python ]; then
  check_python
  check_disk
  echo "==> creating .venv with $($PYTHON_BIN --version)"
  "$PYTHON_BIN" -m venv .venv
fi
# Reinstall only when setup.cfg changed since these extras (or `dev`, which holds every other) were installed.
installed() { [ -f ".venv/.installed-$1" ] && [ ! setup.cfg -nt ".venv/.installed-$1" ]; }
if ! { installed "$EXTRAS" || installed dev; } || ! .venv/bin/python -c "import ernie_deploy" 2>/dev/null; then
  check_disk
  echo "==> installing ernie-deploy and its pinned dependencies into .venv (extras: $EXTRAS)"
  .venv/bin/python -m pip install --quiet --upgrade pip
  if [ "$EXTRAS" = dev ]; then
    .venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"
    # The tests start many processes, each reading whatever module it imports: bytecode for every file, also of
    # the packages an earlier pipeline install left uncompiled (below).
    .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" >/dev/null || true
  else
    # Bytecode for what the pipeline imports, not for every file of every package: pip compiles each installed
    # file (paddle's and paddlenlp's thousands); the imports below compile the ones the commands read. Measured back
    # to back on 2 busy cores: 129 s to install with pip's compiling, 63 s without it, plus about 20 s for these
    # imports. Written even where PYTHONDONTWRITEBYTECODE is set, which would make every later process compile
    # them again (13 s an import of paddle and paddlenlp, measured).
    .venv/bin/python -m pip install --quiet --no-compile -e ".[$EXTRAS]"
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c 'import ernie_deploy.cli, ernie_deploy.serving.pipeline, paddle, paddlenlp.transformers, paddle2onnx, onnx, onnxruntime, tritonclient.grpc, tritonclient.http, pytriton, sklearn.metrics, seqeval.metrics' 2>/dev/null || true
  fi
  touch ".venv/.installed-$EXTRAS"
fi
export PATH="$ROOT/.venv/bin:$PATH"
