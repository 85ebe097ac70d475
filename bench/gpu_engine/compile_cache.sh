#!/bin/bash
# Device side, from the checkout root, after `dev.sh install`: real vLLM engines that share (or do
# not share) a torch.compile cache, for issue 41's ground truth.
#   bash bench/gpu_engine/compile_cache.sh [STEP...]   (default: every step, in order)
# Each step runs bench/gpu_engine/run_engine.py (the llama model) with VLLM_LOGGING_LEVEL=DEBUG,
# so the engine prints its own cache factors (env, config, compiler and code hashes) and the files
# Dynamo traced. Cache roots: /tmp/ccA (shared by the first five runs, as a team's shared cache),
# /tmp/ccB (a run killed while it compiles, then the same command again).
# Writes $OUT/<step>.log, and $OUT/cc-<stamp>.tgz: the logs, a listing of every cache root
# (path, size, mtime) and the small text files the engine wrote there (json, py, txt < 256 KiB).
H=$(cd "$(dirname "$0")" && pwd)
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false PYTHONPATH=/tmp/site \
  VLLM_LOGGING_LEVEL=DEBUG
OUT=${OUT:-/tmp/cc-out}; mkdir -p "$OUT"
steps=${*:-"cc_base cc_gmu05 cc_seqs64 cc_ngram3 cc_f32high cc_killed cc_after_kill"}

run() {  # STEP ROOT KWARGS [ENV=VALUE...]
  local step=$1 root=$2 kw=$3; shift 3
  for i in $(seq 30); do u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    [ "$u" -lt 2000 ] && break; sleep 1; done
  echo "=== $step root=$root kwargs=$kw env=$* $(date -u +%H:%M:%S)"
  env VLLM_CACHE_ROOT=$root "$@" timeout -k 10 240 python3 $H/run_engine.py $step $H/models/llama "$kw" \
    > $OUT/$step.log 2>&1
  echo "rc=$?"
}

killed() {  # STEP ROOT: kill the engine while Inductor compiles (after its cache line)
  local step=$1 root=$2
  echo "=== $step root=$root (killed while compiling) $(date -u +%H:%M:%S)"
  VLLM_CACHE_ROOT=$root setsid python3 $H/run_engine.py $step $H/models/llama '{}' > $OUT/$step.log 2>&1 &
  local pid=$!
  for i in $(seq 240); do grep -q "Using cache directory" $OUT/$step.log && break; sleep 0.5; done
  sleep 3; echo "KILLED $step at $(date -u +%H:%M:%S.%N) after its cache line" >> $OUT/$step.log
  kill -9 -- -$pid 2>/dev/null; wait $pid; echo "rc=$? (killed)"
  sleep 3
}

for s in $steps; do
  case $s in
    cc_base) run $s /tmp/ccA '{}' ;;
    cc_gmu05) run $s /tmp/ccA '{"gpu_memory_utilization": 0.5}' ;;
    cc_seqs64) run $s /tmp/ccA '{"max_num_seqs": 64}' ;;
    cc_ngram3) run $s /tmp/ccA '{"speculative_config": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4, "prompt_lookup_min": 2}}' ;;
    cc_f32high) run $s /tmp/ccA '{}' VLLM_FLOAT32_MATMUL_PRECISION=high ;;
    cc_killed) killed $s /tmp/ccB ;;
    cc_after_kill) run $s /tmp/ccB '{}' ;;
  esac
  grep -aE "Using cache directory|cache factors|AOT|from the cache|Compiling a graph|Error" $OUT/$s.log | cut -c1-300 | head -12
done
for r in /tmp/ccA /tmp/ccB; do
  [ -d $r ] || continue
  find $r -printf '%P\t%s\t%T@\t%y\n' | sort > $OUT/listing-$(basename $r).tsv
  (cd $r && find . -type f \( -name '*.json' -o -name '*.py' -o -name '*.txt' \) -size -256k -print0 \
    | tar -czf $OUT/files-$(basename $r).tgz --null -T -)
done
(cd $OUT && tar -czf cc-$(date +%H%M%S).tgz *.log listing-*.tsv files-*.tgz && rm -f *.log listing-*.tsv files-*.tgz)
ls -la $OUT
