#!/usr/bin/env bash
# Prove or disprove specgguf's GPU claims with one command on a borrowed NVIDIA machine.
#
#   bash scripts/gpu_check.sh --prepare     # HERE, with network, once: fills .gpu/ (the pinned
#                                           # llama-cpp-python source, trimmed, and the wheels
#                                           # specgguf needs); carry .gpu/ with the repository
#   bash scripts/gpu_check.sh               # THERE, no network: build llama-cpp-python for
#                                           # CUDA, write the models, measure, print a summary
#   bash scripts/gpu_check.sh --cpu-smoke   # anywhere with scripts/setup.sh's .venv: the same
#                                           # pipeline on tiny models with the CPU build
#
# The GPU run: (1) builds libllama + ggml (CPU and CUDA, -DCMAKE_CUDA_ARCHITECTURES=native) with
# CMake and Ninja from .gpu/llama-src, only the `llama` target, while (2) scripts/gpu_models.py
# writes a Qwen2.5-7B-shaped f16 target (architecture llama), a 2-layer draft sharing its
# embeddings, output head and first layers, and an EAGLE-3 head over it (agreement set by
# construction, measured here); then (3) scripts/gpu_check.py runs `specgguf check` and
# `specgguf run` with each drafter, the verify cost curve over 1..16 tokens, the Python
# overhead per round (scripts/bench_overhead.py), `specgguf bench` for draft-simple and for
# draft-eagle3 (plain, K = 2..8, auto), draft-simple at depth 5 as a chain and as a tree
# (--spec-tree-topk 4 --spec-tree-nodes 12: a run and a bench each, gpu_check.py's
# TREE_SHAPES), one step of each EAGLE-3 head, model and target
# (scripts/bench_head_step.py), and prints the summary. Build and models stay in .gpu-work/ (not carried):
# a second call on the same machine reuses them, and a build cut short resumes where it stopped.
# Results: .gpu-work/results/ (and $OUT/ when the device tool provides it).
#
# Settings: SPECGGUF_GPU_DIR (.gpu), SPECGGUF_GPU_WORK (.gpu-work), SPECGGUF_GPU_CMAKE_ARGS
# (extra CMake flags, e.g. -DGGML_CUDA_FA=OFF to skip the FlashAttention kernels and build faster),
# SPECGGUF_GPU_AGREEMENT (0.8: the designed greedy agreement of draft and target),
# SPECGGUF_GPU_MEASURE_ARGS (extra options of gpu_check.py measure, e.g. "--repeat 1 --reps 3"
# for a shorter lease), PYTHON;
# for --prepare, SPECGGUF_SDIST (a llama_cpp_python-0.3.36.tar.gz already downloaded).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GPU_DIR=${SPECGGUF_GPU_DIR:-$ROOT/.gpu}
WORK=${SPECGGUF_GPU_WORK:-$ROOT/.gpu-work}
LLAMA_CPP_PYTHON_VERSION=0.3.36
NO_AMX="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"  # as scripts/setup.sh: ggml's AMX kernels crash
T_START=$(date +%s)

die() { echo "gpu_check: $*" >&2; exit 1; }
say() { echo "gpu_check: [$(( $(date +%s) - T_START ))s] $*" >&2; }

MODE=gpu
case "${1:-}" in
  "") ;;
  --prepare) MODE=prepare ;;
  --cpu-smoke) MODE=smoke ;;
  -h|--help) sed -n '2,30p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown option $1 (--prepare, --cpu-smoke or nothing)" ;;
esac

# -- --prepare: here, with network ------------------------------------------------------------
if [ "$MODE" = prepare ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}
  [ -x "$PY" ] || die "no $PY: run bash scripts/setup.sh first (the wheels are pinned to its versions)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if [ -n "${SPECGGUF_SDIST:-}" ]; then  # an already downloaded llama_cpp_python-0.3.36.tar.gz
    sdist=$SPECGGUF_SDIST
    case "$(basename "$sdist")" in
      llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz) ;;
      *) die "SPECGGUF_SDIST must be llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" ;;
    esac
  else
    say "downloading the llama-cpp-python $LLAMA_CPP_PYTHON_VERSION source (pip download)"
    "$PY" -m pip download -q --no-deps --no-binary :all: -d "$tmp" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
    sdist=$(ls "$tmp"/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz)
  fi
  mkdir -p "$GPU_DIR"
  say "trimming it into $GPU_DIR/llama-src"
  "$PY" "$ROOT/scripts/gpu_check.py" trim "$sdist" "$GPU_DIR/llama-src" >&2
  sha256sum "$sdist" | cut -d' ' -f1 > "$GPU_DIR/llama-src/SDIST_SHA256"
  # specgguf's dependencies (numpy aside: the GPU machine has it) as wheels for CPython
  # 3.10-3.13, each the newest not newer than what .venv runs (so exactly that for .venv's
  # Python); click for a typer old enough to need it, pydantic for one new enough to need it.
  # MarkupSafe, PyYAML and pydantic-core are compiled (one wheel per Python version).
  pins=$("$PY" - <<'EOF'
from importlib.metadata import PackageNotFoundError, version
names = ["gguf", "typer", "annotated-doc", "click", "rich", "markdown-it-py", "mdurl", "pygments",
         "shellingham", "jinja2", "markupsafe", "diskcache", "typing-extensions", "pyyaml", "tqdm",
         "pydantic", "pydantic-core", "annotated-types", "typing-inspection"]
out = []
for n in names:
    try:
        out.append(f"{n}<={version(n)}")
    except PackageNotFoundError:
        out.append(n)
print(" ".join(out))
EOF
)
  rm -rf "$GPU_DIR/wheels"
  mkdir -p "$GPU_DIR/wheels"
  for pyv in 3.10 3.11 3.12 3.13; do
    say "wheels for CPython $pyv: $pins"
    # shellcheck disable=SC2086
    "$PY" -m pip download -q --no-deps --only-binary :all: --python-version "$pyv" \
      --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform manylinux_2_28_x86_64 -d "$GPU_DIR/wheels" $pins >&2
  done
  say "configuring the trimmed source for the CPU (a check that CMake finds everything it needs)"
  if command -v cmake >/dev/null; then
    cmake -S "$GPU_DIR/llama-src/vendor/llama.cpp" -B "$tmp/configure" -DBUILD_SHARED_LIBS=ON \
      -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >/dev/null \
      || die "CMake cannot configure the trimmed source: see the output above"
  fi
  size=$(du -sm "$GPU_DIR" | cut -f1)
  echo "gpu_check: prepared $GPU_DIR: $(du -sh "$GPU_DIR/llama-src" | cut -f1) source," \
       "$(du -sh "$GPU_DIR/wheels" | cut -f1) wheels, ${size} MiB in all (carry .gpu with the repository)"
  [ "$size" -lt 60 ] || die "$GPU_DIR is ${size} MiB: too much to travel (64 MiB with the repository)"
  exit 0
fi

# -- the run (GPU, or --cpu-smoke) ------------------------------------------------------------
RESULTS=$WORK/results
mkdir -p "$RESULTS"
rm -f "$RESULTS/results.json" "$RESULTS/phases.json"
phases=()
phase() { phases+=("\"$1\": $2"); }
# what the device tool brings back (also when a call runs out of time): files under $OUT
to_out() { if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then cp "$@" "$OUT/" 2>/dev/null || true; fi; }

if [ "$MODE" = smoke ]; then
  PY=${PYTHON:-$ROOT/.venv/bin/python}
  [ -x "$PY" ] || PY=python3
  "$PY" -c "import llama_cpp, gguf, specgguf" 2>/dev/null \
    || die "--cpu-smoke needs specgguf installed with its CPU llama-cpp-python (bash scripts/setup.sh)"
  SHAPE=tiny
  NGL=0
  MEASURE=(--smoke --reps 2 --n-run 16 --n-bench 16 --n-overhead 16 --warm-rounds 20 --repeat 1
           --threads 1 --ctx 2048 --overhead-configs "draft-simple:4;none")
  gpu="none (CPU smoke)"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
  PY=${PYTHON:-python3}
  command -v nvidia-smi >/dev/null || die "no nvidia-smi: this is not an NVIDIA GPU machine (try --cpu-smoke)"
  gpu=$(nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader | head -n1) \
    || die "nvidia-smi finds no GPU"
  NVCC=${CUDACXX:-$(command -v nvcc || true)}
  [ -n "$NVCC" ] || { [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc; } \
    || die "no nvcc (the CUDA toolkit): not on PATH, in \$CUDACXX or /usr/local/cuda/bin"
  export CUDACXX=$NVCC
  CUDA_HOME=$(cd "$(dirname "$NVCC")/.." && pwd)
  export LD_LIBRARY_PATH="$CUDA_HOME/lib64:$CUDA_HOME/targets/x86_64-linux/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for tool in cmake ninja; do command -v $tool >/dev/null || die "no $tool on this machine"; done
  "$PY" -c "import sys, numpy; sys.exit(sys.version_info < (3, 10))" 2>/dev/null \
    || die "$PY must be Python >= 3.10 with numpy"
  [ -f "$GPU_DIR/llama-src/vendor/llama.cpp/CMakeLists.txt" ] \
    || die "no $GPU_DIR/llama-src: run bash scripts/gpu_check.sh --prepare where there is network, and carry .gpu"
  ls "$GPU_DIR"/wheels/gguf-*.whl >/dev/null 2>&1 || die "no gguf wheel in $GPU_DIR/wheels (--prepare)"
  SHAPE=7b
  NGL=all
  # shellcheck disable=SC2206
  MEASURE=(${SPECGGUF_GPU_MEASURE_ARGS:-})
  SITE=$WORK/site
  say "installing the wheels from $GPU_DIR/wheels into $SITE"
  "$PY" "$ROOT/scripts/gpu_check.py" install-wheels "$GPU_DIR/wheels" "$SITE" >/dev/null
  export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
say "GPU: $gpu"

# (1) the CUDA build, in the background, while (2) the models are written
BUILD=$WORK/build
build_pid=
if [ "$MODE" = gpu ]; then
  jobs=$(nproc)
  say "building llama-cpp-python's libllama with CUDA (ninja -j$jobs, log: $BUILD.log)"
  (
    t0=$(date +%s)
    if [ ! -f "$BUILD/build.ninja" ]; then
      # shellcheck disable=SC2086
      cmake -S "$GPU_DIR/llama-src/vendor/llama.cpp" -B "$BUILD" -G Ninja \
        -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON \
        -DCMAKE_C_FLAGS="$NO_AMX" -DCMAKE_CXX_FLAGS="$NO_AMX" \
        -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native \
        -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
        -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON "-DCMAKE_INSTALL_RPATH=\$ORIGIN" \
        "-DCMAKE_SHARED_LINKER_FLAGS=-Wl,--exclude-libs,ALL" \
        ${SPECGGUF_GPU_CMAKE_ARGS:-}
    fi
    ninja -C "$BUILD" -j "$jobs" llama
    echo $(( $(date +%s) - t0 )) > "$BUILD.seconds"
  ) > "$BUILD.log" 2>&1 &
  build_pid=$!
fi

t0=$(date +%s)
say "writing the $SHAPE target, draft and EAGLE-3 head into $WORK/models-$SHAPE"
models=$("$PY" "$ROOT/scripts/gpu_models.py" --out "$WORK/models-$SHAPE" --shape "$SHAPE" \
  --agreement "${SPECGGUF_GPU_AGREEMENT:-0.8}")
phase write_models $(( $(date +%s) - t0 ))
say "models: $models"
TARGET=$WORK/models-$SHAPE/target.gguf
DRAFT=$WORK/models-$SHAPE/draft.gguf
HEAD=$WORK/models-$SHAPE/head.gguf

if [ -n "$build_pid" ]; then
  say "waiting for the build"
  wait "$build_pid" || { tail -n 30 "$BUILD.log" >&2; to_out "$BUILD.log"; die "the CUDA build failed (log: $BUILD.log)"; }
  phase build "$(cat "$BUILD.seconds")"
  say "build done in $(cat "$BUILD.seconds") s"
  # llama_cpp's Python files from the trimmed source, its libraries from this build
  rm -rf "$SITE/llama_cpp"
  cp -r "$GPU_DIR/llama-src/llama_cpp" "$SITE/llama_cpp"
  mkdir -p "$SITE/llama_cpp/lib"
  find "$BUILD" -name 'lib*.so*' \( -type f -o -type l \) -exec cp -a {} "$SITE/llama_cpp/lib/" \;
  ln -sfn "$ROOT/cli" "$SITE/specgguf_cli"
  "$PY" -c "import llama_cpp, sys; sys.exit(0 if llama_cpp.llama_supports_gpu_offload() else 1)" \
    || die "the built llama-cpp-python cannot offload to the GPU"
  # The first H200 run (CUDA 13.0 image) linked libstdc++ statically into libggml-cuda and
  # exported its symbols; libllama's stream calls then bound to that copy and the load crashed
  # in print_info whenever a Python log callback was set (specgguf's always is).
  # --exclude-libs,ALL above keeps them private: check it took, and load once before measuring.
  if command -v nm >/dev/null && nm -D --defined-only "$SITE"/llama_cpp/lib/libggml-cuda.so* 2>/dev/null \
       | grep -q ' T _ZNSo'; then
    die "libggml-cuda exports libstdc++'s symbols (a static libstdc++ made public): loading would crash"
  fi
  say "one short run on the GPU before the measurements"
  "$PY" -m specgguf_cli.app run -m "$TARGET" -ngl all -c 512 -p "Once" -n 4 --temp 0 \
    --spec-type none >/dev/null || die "a 4-token specgguf run on the GPU failed (exit $?)"
fi

cpus=$(nproc)
cuda=$([ "$MODE" = gpu ] && "$NVCC" --version | tail -n 1 || echo "-")
"$PY" - "$RESULTS/environment.json" "$gpu" "$cuda" "$cpus" "$models" <<'EOF'
import json, sys
out, gpu, cuda, cpus, models = sys.argv[1:]
m = json.loads(models)
sizes = ", ".join(f"{k} {m.get(k + '_bytes', 0) / 2**30:.2f} GiB" for k in ("target", "draft", "head"))
json.dump({"gpu": gpu, "cuda": cuda, "cpus": cpus, "python": sys.version.split()[0],
           "models": f"{m['shape']}: {sizes}, designed agreement {m['agreement']}"}, open(out, "w"))
EOF
to_out "$RESULTS/environment.json"

t0=$(date +%s)
say "measuring"
"$PY" "$ROOT/scripts/gpu_check.py" measure --target "$TARGET" --draft "$DRAFT" --head "$HEAD" --out "$RESULTS" \
  --ngl "$NGL" "${MEASURE[@]}"
phase measure $(( $(date +%s) - t0 ))
phase total $(( $(date +%s) - T_START ))
(IFS=,; echo "{${phases[*]}}") > "$RESULTS/phases.json"
"$PY" "$ROOT/scripts/gpu_check.py" summary "$RESULTS" | tee "$RESULTS/summary.txt"
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  cp "$RESULTS"/*.json "$RESULTS/summary.txt" "$OUT/" 2>/dev/null || true
  [ -f "$BUILD.log" ] && tail -n 200 "$BUILD.log" > "$OUT/build.log.tail"
fi
