#!/bin/sh
# Reconstructed (issue 27 shape): a draft whose name says it is an MTP head.
llama-server -m models/GLM-4.5-Air-Q4_K_M.gguf -md models/GLM-4.5-Air-MTP-Q8_0.gguf --draft-max 4
