#!/usr/bin/env bash
# Set up .venv with specgguf and a llama-cpp-python built for THIS machine, safely.
#
# Why this is not just `pip install llama-cpp-python`:
# - PyPI ships it as an sdist, compiled with -march=native. On CPUs that report AMX, ggml then
#   routes matrix products through its AMX kernels and the first decode dies with SIGSEGV.
#   We keep the native build (fastest) but switch AMX off in the compiler.
# - pip caches built wheels without looking at CMAKE_ARGS, so a crashing wheel from an earlier
#   build can be silently reused. We build with --no-cache-dir into a wheel directory keyed by
#   (version, CMAKE_ARGS, Python, CPU flags) and install from there only.
# Extra CMake flags go in SPECGGUF_CMAKE_ARGS. For an NVIDIA GPU (-ngl / -ngld):
#   SPECGGUF_CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native" bash scripts/setup.sh
# needs nvcc (the CUDA toolkit) and, with `native`, the GPU itself at build time. Such a wheel is
# keyed apart from the CPU one (the flags, nvcc's version and the GPUs are part of the key), and
# on a machine without that GPU specgguf refuses it in one line (exit 7) instead of running on
# the CPU unnoticed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${SPECGGUF_VENV:-$ROOT/.venv}
LLAMA_CPP_PYTHON_VERSION=0.3.36
PYTHON=${PYTHON:-python3}

NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS='$NO_AMX' -DCMAKE_CXX_FLAGS='$NO_AMX' -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF ${SPECGGUF_CMAKE_ARGS:-}"

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"

cpu_flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || uname -m)
case " $CMAKE_ARGS " in
  *GGML_CUDA=ON*|*GGML_CUDA=on*|*GGML_CUDA=1*)
    # A CUDA wheel also depends on the toolkit and (with `native`) on the GPUs it was built on.
    NVCC=${CUDACXX:-$(command -v nvcc || true)}
    if [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
    if [ -z "$NVCC" ]; then
      echo "specgguf setup: -DGGML_CUDA=ON needs nvcc (the CUDA toolkit): not found on PATH, in \$CUDACXX or /usr/local/cuda/bin" >&2
      exit 1
    fi
    export CUDACXX=$NVCC
    gpus=$(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null || echo "no nvidia-smi")
    cpu_flags="$cpu_flags
$("$NVCC" --version | tail -n 2)
$gpus"
    ;;
esac
key=$(printf '%s\n%s\n%s\n%s\n' "$LLAMA_CPP_PYTHON_VERSION" "$CMAKE_ARGS" "$("$PY" -c 'import sys; print(sys.version)')" "$cpu_flags" | sha256sum | cut -c1-16)
WHEELS=${SPECGGUF_WHEELS:-$HOME/.cache/specgguf/wheels}/$key
wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl 2>/dev/null | head -n1 || true)

if [ -z "$wheel" ]; then
  echo "specgguf setup: building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION (native, no AMX${SPECGGUF_CMAKE_ARGS:+; $SPECGGUF_CMAKE_ARGS}; several minutes on 2 cores)" >&2
  mkdir -p "$WHEELS"
  CMAKE_ARGS="$CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
    "$PY" -m pip wheel --no-cache-dir --no-deps --no-binary llama-cpp-python \
      -w "$WHEELS" "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
  wheel=$(ls "$WHEELS"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION"-*.whl | head -n1)
fi

installed=$("$PY" -m pip show llama-cpp-python 2>/dev/null | awk '/^Version:/{print $2}' || true)
marker="$VENV/.specgguf-llama-wheel"
if [ "$installed" != "$LLAMA_CPP_PYTHON_VERSION" ] || [ "$(cat "$marker" 2>/dev/null)" != "$wheel" ]; then
  "$PY" -m pip install -q --no-deps --force-reinstall "$wheel" >&2
  echo "$wheel" > "$marker"
fi
"$PY" -m pip install -q -e "$ROOT[test,llama]" >&2  # llama: the wheel above is kept, its dependencies come
echo "specgguf setup: ready ($VENV; llama-cpp-python from $wheel)" >&2
