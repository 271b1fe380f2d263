#!/bin/sh
# Negative control: a draft model and no removed flag: nothing to change.
llama-server -m t.gguf -md d.gguf -c 8192
