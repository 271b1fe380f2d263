#!/bin/bash
helm upgrade --install llm ./charts/llama-server --namespace ai --set image.tag=server-cuda --set env.LLAMA_ARG_MODEL_DRAFT=/models/d.gguf --set env.LLAMA_ARG_DRAFT_MAX=16
