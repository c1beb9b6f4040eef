#!/usr/bin/env bash
# Prepares the lent GPU machine (../shared/reference/device.md) for the GPU benchmarks, in
# calls that follow each other within its warm window (64 MiB carried per call):
#   bash benchmarks/device/prepare.sh gguf      carry .gguf/part_aa, then again with .gguf/part_ab:
#                                               collects the parts of SmolLM2-135M-Instruct's GGUF
#                                               (split -b 60M) in /root/gguf and joins them once
#                                               all are there, checking the preset's SHA-256
#   bash benchmarks/device/prepare.sh install   carry .whl (the wheel set) and optionally .carry:
#                                               installs the wheels into the system Python, lets the
#                                               sandbox user reach it, converts the GGUF (when the gguf
#                                               step brought it) to a dense HF folder
#                                               (/root/smollm2-135m) and unpacks
#                                               .carry/*.tar.gz (e.g. a workflow-built corpus)
set -euo pipefail
GGUF_DIR=/root/gguf
MODEL=/root/smollm2-135m
GGUF=$GGUF_DIR/SmolLM2-135M-Instruct.Q4_1.gguf
PARTS=(part_aa part_ab)

case "${1:?usage: prepare.sh gguf|install}" in
gguf)
  mkdir -p "$GGUF_DIR"
  cp .gguf/part_* "$GGUF_DIR"/
  for part in "${PARTS[@]}"; do [ -f "$GGUF_DIR/$part" ] || { echo "waiting for $part"; exit 0; }; done
  (cd "$GGUF_DIR" && cat "${PARTS[@]}" > "$GGUF" && rm -f "${PARTS[@]}")
  PYTHONPATH=src python3 - "$GGUF" <<'PY'
import hashlib, sys
from chorus.modeling import GGUF_PRESETS
digest = hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()
assert digest == GGUF_PRESETS["smollm2-135m"].sha256, f"SHA-256 {digest} is not the preset's"
print("gguf ok", digest)
PY
  ;;
install)
  python3 -m pip install -q --no-index --no-deps .whl/*.whl
  PYTHONPATH=src python3 -c "from chorus.harness.sandbox import grant_traversal as g; g()"
  if [ ! -d "$MODEL" ] && [ -f "$GGUF" ]; then  # no GGUF carried: benchmarks on random weights only
    PYTHONPATH=src python3 - "$GGUF" "$MODEL" <<'PY'
import sys
from chorus.modeling import load_gguf, save_model_atomically
model, tokenizer = load_gguf(sys.argv[1])
save_model_atomically(model, tokenizer, sys.argv[2])
print("converted", sys.argv[2])
PY
  fi
  for archive in .carry/*.tar.gz; do [ -f "$archive" ] && tar -xzf "$archive"; done
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  ;;
*) echo "unknown step $1" >&2; exit 2 ;;
esac
