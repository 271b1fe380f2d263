# Synthetic (round 3 shapes): a Python subprocess argument list, one flag and value per line.
import subprocess

cmd = [
    "./llama-server",
    "-m", "models/t.gguf",
    "-md", "models/d.gguf",
    "--draft-max", "16",
    "--draft-min", "4",
]
subprocess.run(cmd, check=True)
