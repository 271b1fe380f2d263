#!/usr/bin/env bash
# Set up (scripts/setup.sh), pull the real model pair (and make its F16 target) for the tests
# marked `real`, then run ruff and the whole test suite. Extra arguments go to pytest, e.g. `-m "not real"`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPECGGUF_VENV:-$ROOT/.venv}
bash "$ROOT/scripts/setup.sh"
if [ "${SPECGGUF_SKIP_PULL:-0}" != 1 ]; then
  "$VENV/bin/specgguf" pull -q   # verified by SHA-256; a no-op when already present
  # the F16 copy of the target (the regime a draft model pays in): made here, ~20 s, 3.4 GB
  "$VENV/bin/specgguf" pull -q target-f16
fi
"$VENV/bin/ruff" check "$ROOT"
cd "$ROOT"
"$VENV/bin/lint-imports"   # the layers (pyproject.toml [tool.importlinter])
exec "$VENV/bin/python" -m pytest -q -ra --durations=25 "$@"
