#!/bin/bash
# Synthetic (round 3 shapes): a `# comment` substitution inside a continued command.
./llama-server \
  -m t.gguf \
  -md d.gguf \
  --draft-max 16 \
  --draft-min 4 `# fewer is slower` \
  --port 8080
