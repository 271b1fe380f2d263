"""llama.cpp and only it: the engine over llama-cpp-python, batched and lockstep passes,
rollback, devices and offload, libllama's grammar sampler, and quantizing."""
