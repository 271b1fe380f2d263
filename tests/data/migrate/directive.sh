#!/bin/sh
# Reconstructed (issue 27 shape): the kind of a draft that is not here, said in a comment.
# specgguf-migrate: draft-kind=eagle3
llama-server -m models/Llama-3.1-8B-Instruct-Q8_0.gguf -md models/head.gguf --draft-max 6
