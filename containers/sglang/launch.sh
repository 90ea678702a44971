#!/usr/bin/env bash
# Start one SGLang server the way claw's sglang backend expects it:
#   * weight_version starts at 0 (claw tags every completion with the version that produced it),
#   * the native API (/generate, /update_weights_from_disk, ...) on 0.0.0.0:$CLAW_SGLANG_PORT.
# Usage: launch.sh --model MODEL [--tp N] [--port P] [-- extra sglang.launch_server flags]
set -euo pipefail

model="${CLAW_SGLANG_MODEL:-}"
tp="${CLAW_SGLANG_TP:-1}"
port="${CLAW_SGLANG_PORT:-30000}"
mem="${CLAW_SGLANG_MEM_FRACTION:-0.85}"
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --tp) tp="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --) shift; extra+=("$@"); break ;;
    *) extra+=("$1"); shift ;;
  esac
done

if [[ -z "$model" ]]; then
  echo "launch.sh: give --model (a Hugging Face id or a path inside the container)" >&2
  exit 2
fi
if ! python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "launch.sh: no CUDA device visible; SGLang needs a GPU (run with --gpus all)" >&2
  exit 3
fi

exec python3 -m sglang.launch_server \
  --model-path "$model" \
  --host 0.0.0.0 \
  --port "$port" \
  --tp-size "$tp" \
  --mem-fraction-static "$mem" \
  --weight-version 0 \
  "${extra[@]}"
