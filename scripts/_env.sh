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
  .venv/bin/python -m pip install --quiet -e ".[$EXTRAS]"
  touch ".venv/.installed-$EXTRAS"
fi
export PATH="$ROOT/.venv/bin:$PATH"
