#!/usr/bin/env bash
# Issue 35 on the lent H200 host, one device call (< 9 min), everything with DEFAULT settings (the handoff
# engine): `typedlm bench gen` JSON/free at batch 1 and 32 (random Qwen2.5-7B, bf16, real Qwen2.5 vocabulary),
# then the whole MaskBench (14 shards) and SchemaStore (2 shards) at once on the 16 cores, time to the FIRST
# mask with the default model's tokenizer (a copy under .corpus/), then MaskBench's 40 slowest first masks
# again in one process alone (the tail without contention). Needs .corpus/ (bench/maskbench.py and
# bench/schemastore.py --save-corpus; the tokenizer folder). Usage (repository root, wheels installed):
#   bash bench/scripts/h200_firstmask.sh      (results: "$OUT"/*.json + logs.tgz)
set -x
[ -f .corpus/maskbench.json.gz ] || echo "no .corpus/: the corpus steps will fail" >&2
out=${OUT:-/tmp/h200-firstmask}; mkdir -p "$out"; work=/tmp/firstmask-work; mkdir -p "$work/dump"
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
unset TYPEDLM_GRAMMAR_ENGINE
{ nproc; nvidia-smi --query-gpu=name,memory.total --format=csv; git rev-parse HEAD; } > "$out/machine.txt" 2>&1
timeout 160 python3 -m typedlm bench gen --arch qwen2.5-7b --device cuda --batch 1 --batch 32 --max-tokens 256 \
    --no-hf --no-hf-static --json "$out/gen-h200-default.json" > "$work/gen.log" 2>&1 || true
tok=.corpus/smollm2-tokenizer
for i in $(seq 0 13); do
    timeout 250 python3 bench/maskbench.py --corpus .corpus/maskbench.json.gz --shard "$i/14" --tokenizer $tok \
        --handoff-wait 1 --log "$work/mb-$i.jsonl" --json "$work/mb-$i.json" > "$work/mb-$i.out" 2>&1 &
done
for i in 0 1; do
    timeout 250 python3 bench/schemastore.py --corpus .corpus/schemastore.json.gz --shard "$i/2" --tokenizer $tok \
        --handoff-wait 1 --log "$work/ss-$i.jsonl" --json "$work/ss-$i.json" > "$work/ss-$i.out" 2>&1 &
done
wait
python3 bench/maskbench.py --corpus .corpus/maskbench.json.gz --merge "$work"/mb-*.jsonl --tokenizer $tok \
    --handoff-wait 1 --json "$out/maskbench-h200.json" --dump "$work/dump/maskbench" --dump-n 40 > "$work/mb-merge.out" 2>&1 || true
python3 bench/schemastore.py --corpus .corpus/schemastore.json.gz --merge "$work"/ss-*.jsonl --tokenizer $tok \
    --handoff-wait 1 --json "$out/schemastore-h200.json" --dump "$work/dump/schemastore" --dump-n 40 > "$work/ss-merge.out" 2>&1 || true
timeout 50 python3 bench/maskbench.py --corpus .corpus/maskbench.json.gz --slowest-of "$out/maskbench-h200.json" \
    --dump-n 40 --tokenizer $tok --handoff-wait 1 --log "$work/mb-slowest.jsonl" \
    --json "$out/maskbench-slowest40-alone-h200.json" > "$work/mb-slowest.out" 2>&1 || true
[ -s "$out/maskbench-slowest40-alone-h200.json" ] || python3 bench/maskbench.py --corpus .corpus/maskbench.json.gz \
    --merge "$work/mb-slowest.jsonl" --tokenizer $tok --json "$out/maskbench-slowest40-alone-h200.json" > /dev/null 2>&1 || true
tar czf "$out/logs.tgz" -C "$work" . || true
ls -la "$out"
