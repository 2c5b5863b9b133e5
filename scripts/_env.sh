# Sourced by the scripts: make .venv with the project installed (once), and put it first on PATH.
# EXTRAS (set before sourcing): the setup.cfg extras the script needs. The pipeline's scripts need `export,serve`
# (the default); scripts/test.sh asks for `dev`, which holds those and the test, lint and deployment-check tools,
# so a first quickstart does not download what only the tests use.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_BIN="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-export,serve}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON_BIN --version)"
  "$PYTHON_BIN" -m venv .venv
fi
# Reinstall only when setup.cfg changed since these extras (or `dev`, which holds every other) were installed.
installed() { [ -f ".venv/.installed-$1" ] && [ ! setup.cfg -nt ".venv/.installed-$1" ]; }
if ! { installed "$EXTRAS" || installed dev; } || ! .venv/bin/python -c "import ernie_deploy" 2>/dev/null; then
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
