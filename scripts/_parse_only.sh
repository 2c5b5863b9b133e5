# Sourced by the scripts when ERNIE_DEPLOY_PARSE_ONLY=1: `parse_with MODULE ARGS...` checks arguments with a parser of
# the project's (`.venv/bin/python -m MODULE ARGS...`, which parses and exits 0, or 2 with argparse's message), without
# making .venv or writing anything; where there is no .venv yet it exits 3, naming what makes it.
PARSE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
parse_with() {
  if [ ! -x "$PARSE_ROOT/.venv/bin/python" ]; then
    echo "$(basename "$0"): checking its arguments needs the project's .venv, which any script makes on its" \
      "first run (bash $0)" >&2
    exit 3
  fi
  (cd "$PARSE_ROOT" && .venv/bin/python -m "$@")
}
