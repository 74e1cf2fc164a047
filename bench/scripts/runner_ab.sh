#!/usr/bin/env bash
# Same-machine A/B of the runner redesign (issue 18) on the lent H200: the commit before the change and
# this checkout, the same commands, alternating (base, new). The base is a copy of that commit's package:
#   git archive 4da0371 typedlm | tar -x -C baseline        (./baseline is git-ignored; carried to the device)
# Usage on the device (wheels from ../shared/tools/device-wheels installed into /tmp/site):
#   bash bench/scripts/runner_ab.sh OUT_DIR gen|decide|check
set -u
out=$(realpath "$1")
what=$2
root=$(pwd)
export PYTHONUNBUFFERED=1
run() {  # run VERSION NAME ARGS...: python -m typedlm ARGS from the version's own tree
  local v=$1 name=$2
  shift 2
  local dir=$root
  [ "$v" = base ] && dir=$root/baseline
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout 280 python3 "$@") > "$out/$name-$v.log" 2>&1
  echo "$name $v: exit $? $(tail -c 300 "$out/$name-$v.log" | tr '\n' ' ' | tail -c 200)"
}
case $what in
  check)
    run new gpu-check "$root/bench/gpu_check.py" qwen2.5-0.5b ;;
  gen)
    for v in base new; do
      run $v gen -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --max-tokens 256 \
        --no-hf --no-hf-static --json "$out/gen-$v.json"
    done ;;
  decide)
    for v in base new; do
      run $v decide -m typedlm bench decide --arch qwen2.5-7b --device cuda --runs 5 --naive-runs 0 \
        --many 1,16,64 --many-runs 3 --out "$out/decide-$v.json"
    done ;;
esac
