# Sourced by the scripts: make .venv with the project installed (once), and put it first on PATH.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON_BIN="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv with $($PYTHON_BIN --version)"
  "$PYTHON_BIN" -m venv .venv
fi
# Reinstall only when setup.cfg changed since the last install.
stamp=".venv/.ernie-deploy-installed"
if [ ! -f "$stamp" ] || [ setup.cfg -nt "$stamp" ] || ! .venv/bin/python -c "import ernie_deploy" 2>/dev/null; then
  echo "==> installing ernie-deploy and its pinned dependencies into .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[dev]"
  touch "$stamp"
fi
export PATH="$ROOT/.venv/bin:$PATH"
