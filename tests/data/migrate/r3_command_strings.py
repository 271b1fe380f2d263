# Synthetic (round 3 shapes): whole command lines as Python strings (os.system, shell=True), an
# f-string and a sentence that mention the flags.
import os
import subprocess

os.system("llama-server -m t.gguf -md d.gguf --draft-max 16 --port 8080")
subprocess.run('./llama-speculative -m t.gguf -md d.gguf --draft 8 -p "hi"', shell=True)
CMD = f"llama-server -m {m} --draft-max {n}"
print("don't use llama-server with --draft-max")
x = 'vllm serve M --speculative-model D --num-speculative-tokens 5'
