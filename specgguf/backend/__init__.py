"""Everything that touches a model file or llama.cpp: the engine over llama-cpp-python, the
loaded model pair (session), GGUF reading, compatibility and pre-flight checks, model pull,
layer offload, RPC devices."""
