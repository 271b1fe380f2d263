# Synthetic (round 3 shapes): a Python subprocess argument list, one flag and value per line.
import subprocess

cmd = [
    "./llama-server",
    "-m", "models/t.gguf",
    "-md", "models/d.gguf", "--spec-type", "draft-simple", "--spec-draft-p-min", "0.75",
    "--spec-draft-n-max", "16",
    "--spec-draft-n-min", "4",
]
subprocess.run(cmd, check=True)
