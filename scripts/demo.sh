#!/usr/bin/env bash
# Fresh machine to first completion: set up, pull the default Qwen2.5-Coder pair (1.5B target,
# 0.5B draft) and generate with the default settings: ngram-map-k and draft-simple under
# --spec-draft-n-max auto, which drafts where that pays on this machine and decodes plainly
# where it cannot; statistics and auto's choices on stderr.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPECGGUF_VENV:-$ROOT/.venv}
bash "$ROOT/scripts/setup.sh"
"$VENV/bin/specgguf" pull
exec "$VENV/bin/specgguf" run -n 128 --temp 0 \
  -p "Write a Python function that returns the n-th Fibonacci number, with a docstring."
