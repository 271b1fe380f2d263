"""specgguf: lossless speculative decoding over GGUF models (llama-cpp-python)."""

__version__ = "0.1.0"
