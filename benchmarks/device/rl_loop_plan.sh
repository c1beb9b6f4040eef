#!/usr/bin/env bash
# Issue 15's GPU measurements as one resumable plan, for successive calls within one warm
# lease (after the two `prepare.sh gguf` calls), each carrying .whl and .carry:
#   bash benchmarks/device/rl_loop_plan.sh [SECONDS]
# Every step runs once (a marker under /root/plan, kept while the machine stays warm),
# only when its estimate fits the SECONDS this call has left (default 560), under
# `timeout`; the next call goes on where this one stopped. A failed step is marked too
# (not retried) and says so. Figures gather in /root/plan/rl_loop_h200.json, seeded from
# benchmarks/results/rl_loop_h200.json (rl_loop.py updates the sections it runs and keeps
# the rest), and are copied to $OUT after every step with the step's log.
set -uo pipefail
END=$(($(date +%s) + ${1:-560}))
PLAN=/root/plan
RESULT=$PLAN/rl_loop_h200.json  # not under $OUT: each call starts with $OUT empty
SFT_MODEL=/root/sft_synth/sft_model
mkdir -p "$PLAN" "${OUT:-/tmp/out}"
OUT=${OUT:-/tmp/out}
export USE_HUB_KERNELS=0 PYTHONPATH=src
[ -f "$RESULT" ] || cp benchmarks/results/rl_loop_h200.json "$RESULT"

# step NAME SECONDS COMMAND...: run COMMAND once, if SECONDS fit in what is left
step() {
  local name=$1 need=$2 left rc
  shift 2
  [ -e "$PLAN/$name.done" ] || [ -e "$PLAN/$name.failed" ] && return 0
  left=$((END - $(date +%s)))
  if ((left < need)); then
    echo "plan: stop before $name (estimate ${need} s, ${left} s left in this call)"
    exit 0
  fi
  echo "plan: $name ($(date -u +%T), ${left} s left)"
  timeout $((left - 5)) "$@" > "$OUT/$name.log" 2>&1
  rc=$?
  if ((rc == 0)); then touch "$PLAN/$name.done"; else echo "$rc" > "$PLAN/$name.failed"; echo "plan: $name failed ($rc)"; fi
  tail -n 5 "$OUT/$name.log"
  cp "$RESULT" "$OUT/"
}

GRPO=(python3 benchmarks/rl_loop.py --model "$SFT_MODEL" --only grpo --grpo-backends static --grpo-tasks 4
      --grpo-steps 16 --budget-s 400 --out "$RESULT")
step install 90 bash benchmarks/device/prepare.sh install
# the half-epoch SFT model: completions that really simulate (~120-190 s on an H100)
step sft 240 python3 benchmarks/sft_synth_pass1.py --model /root/smollm2-135m --work /root/sft_synth \
  --tasks results/smollm2_h200/tasks/manifest.json --phases corpus sft --epochs 0.5 --out "$OUT/sft.json"
# what 2026-12-06's lease left open, in order: uneven rows through refilled slots vs calls
# one after another vs all at once (the cases ran out of memory then), and the 256-row
# rollout batch at nice 0 and 10 in one lease (nice 10 was measured, nice 0 a lease before)
step decode 300 python3 benchmarks/rl_loop.py --only decode --decode-cases stragglers batch512 --budget-s 280 \
  --out "$RESULT"
step grpo256 150 "${GRPO[@]}" --grpo-steps-per-generation 8
step grpo256_nice10 150 "${GRPO[@]}" --grpo-steps-per-generation 8 --sim-nice 10
# the measured fastest shape again, the figure of benchmarks/README.md
step grpo512 150 "${GRPO[@]}" --grpo-steps-per-generation 16
echo "plan: every step ran"
