#!/bin/bash
helm upgrade --install llm ./charts/llama-server --namespace ai --set image.tag=server-cuda --set env.LLAMA_ARG_SPEC_DRAFT_MODEL=/models/d.gguf --set env.LLAMA_ARG_SPEC_DRAFT_N_MAX=16 --set env.LLAMA_ARG_SPEC_TYPE=draft-simple --set env.LLAMA_ARG_SPEC_DRAFT_P_MIN=0.75
