# Synthetic (round 3 shapes): Python argument lists: single quotes with variables and str(n) as
# values, a splat, a table of flag names, and a list whose tool is sys.executable.
import subprocess
import sys

REMOVED = ["--draft", "--draft-max"]  # a table of names, not a command


def serve(model, draft, n, extra):
    subprocess.Popen(['llama-server', '-m', model, '-md', draft, '--spec-type', 'draft-simple', '--spec-draft-p-min', '0.75', '--spec-draft-n-max', str(n),
                      '--port', '8080'])  # the server
    subprocess.run(["./build/bin/llama-speculative", "-m", model, "-md", draft, "--draft", "8",
                    *extra])
    return [sys.executable, "-m", "bench", "--draft-max", "4"]
