#!/bin/bash
# Synthetic (round 3 shapes): a `# comment` substitution inside a continued command.
./llama-server \
  -m t.gguf \
  -md d.gguf \
  --spec-draft-n-max 16 \
  --spec-draft-n-min 4 `# fewer is slower` \
  --port 8080
