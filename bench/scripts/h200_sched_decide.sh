#!/usr/bin/env bash
# Does a started Scheduler slow later decisions on the H200 (random Qwen2.5-7B, bf16)? One device call, < 9 minutes:
# bench/scripts/sched_decide_probe.py (decide with the prefix cache off: no scheduler / started / after chats /
# stopped; wall, device time, Python calls, kernels) for this tree, this tree without the compiled decode layer,
# and the base tree when a copy of its package is at .base/typedlm (carry it: run(carry=[".base"])). JSON under $OUT/.
# Usage (repository root): OUT=/some/dir bash bench/scripts/h200_sched_decide.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site:$PWD || exit
out=${OUT:-/tmp/h200}; mkdir -p "$out"; export PYTHONUNBUFFERED=1
t_start=$(date +%s)
probe() { local name=$1; shift; echo "== $name ($(date +%T))" >&2
  env "$@" timeout 160 python3 bench/scripts/sched_decide_probe.py --arch qwen2.5-7b --runs 5 > "$out/$name.json"
  echo "== rc $? after $(( $(date +%s) - t_start )) s" >&2; grep '^{"stage' "$out/$name.json" | cut -c1-200 >&2; }
probe new PYTHONPATH=/tmp/site:$PWD
probe new-no-compile PYTHONPATH=/tmp/site:$PWD TYPEDLM_COMPILE_DECODE=0
if [ -d .base/typedlm ]; then probe base PYTHONPATH=/tmp/site:$PWD/.base:$PWD; fi
echo "total $(( $(date +%s) - t_start )) s" >&2
