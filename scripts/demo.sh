#!/usr/bin/env bash
# Fresh machine to first completion: set up, pull the default Qwen2.5-Coder pair (1.5B target,
# 0.5B draft) and show what speculative decoding is for, measured on this machine. The prompt
# is the kind of job where it pays even on a small CPU: "fix one line and print the whole
# file" (the first `edit` prompt of scripts/bench_prompts.jsonl), whose answer copies most of
# the file, so the default's n-gram lookup can draft long runs of it. The same prompt is
# decoded twice, back to back: plainly (--spec-type none, quiet) and with the default settings
# (ngram-map-k and draft-simple under --spec-draft-n-max auto, no flags), whose text streams
# here with its statistics; a closing line says how much faster than plain decoding it was in
# this run, and whether the text was the same (greedy: it must be).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPECGGUF_VENV:-$ROOT/.venv}
bash "$ROOT/scripts/setup.sh"
"$VENV/bin/specgguf" pull

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# the prompt as the target's chat template renders it (hence --no-chat below)
"$VENV/bin/python" - "$ROOT/scripts/bench_prompts.jsonl" "$TMP/prompt.txt" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8") if line.strip()]
open(sys.argv[2], "w", encoding="utf-8").write(next(r for r in rows if r["class"] == "edit")["prompt"])
EOF
RUN=("$VENV/bin/specgguf" run -f "$TMP/prompt.txt" --no-chat -n 512 --temp 0)

echo "demo: plain decoding first (--spec-type none), to compare with ..." >&2
"${RUN[@]}" --spec-type none --json -q > "$TMP/plain.json"
echo "demo: now the default, no flags: speculative decoding where it pays" >&2
"${RUN[@]}" 2> "$TMP/stats.txt" | tee "$TMP/text.txt"
cat "$TMP/stats.txt" >&2

"$VENV/bin/python" - "$TMP/plain.json" "$TMP/text.txt" "$TMP/stats.txt" <<'EOF'
import json, re, sys
plain = json.load(open(sys.argv[1], encoding="utf-8"))
text = open(sys.argv[2], encoding="utf-8").read()
m = re.search(r"^decoded\s+(\d+) tokens in\s+([\d.]+) seconds", open(sys.argv[3]).read(), re.M)
n, s = int(m.group(1)), float(m.group(2))
fast = n / s
slow = 1e3 * plain["timings"]["predicted_n"] / plain["timings"]["predicted_ms"]
same = text in (plain["text"], plain["text"] + "\n")  # run ends the text with a newline
verdict = "faster than" if fast > slow else "not faster than"
print(
    f"demo: the default decoded {n} tokens at {fast:.1f} t/s, plain decoding {slow:.1f} t/s in "
    f"this same run: x{fast / slow:.2f}, {verdict} plain decoding; "
    + ("the same text, token for token" if same else "THE TEXT DIFFERS from plain decoding's"),
    file=sys.stderr,
)
EOF
