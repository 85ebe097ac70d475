#!/bin/bash
# GPU machine driver, run from the checkout root: bash bench/gpu_engine/dev.sh STEP [ARGS...]
#   part N      copy the carried part folder .gpuN into /tmp/parts (checks its SHA256SUMS)
#   install     reassemble /tmp/parts into /tmp/site (idempotent; whatever parts are there)
#   info        GPU, torch, disk
#   queue [C..] run the cases of cases.json not yet done on this machine (or the named ones),
#               in order, each under a timeout that keeps the call inside CALL_BUDGET (575 s);
#               full logs go to $OUT/<case>.log, then one $OUT/logs-<stamp>.tgz of this call's logs.
H=$(cd "$(dirname "$0")" && pwd)
T0=${T0:-$(date +%s)}; BUDGET=${CALL_BUDGET:-575}
export VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
step=$1; shift
case $step in
part)
  n=$1; mkdir -p /tmp/parts; cp -f .gpu$n/* /tmp/parts/ && (cd /tmp/parts && sha256sum -c SHA256SUMS.$n) ;;
info)
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
  python3 -c "import torch,triton,sys,transformers;print(torch.__version__,triton.__version__,sys.version.split()[0],transformers.__version__,torch.cuda.is_available())"
  df -h /tmp | tail -1; nproc ;;
install)
  set -e
  mkdir -p /tmp/site; cd /tmp/parts
  if [ -f rest.tar.xz ] && [ ! -f /tmp/site/.rest_done ]; then xz -T0 -dc rest.tar.xz | tar -x -C /tmp/site; touch /tmp/site/.rest_done; fi
  if [ -f deps.tar ] && [ ! -f /tmp/site/.deps_done ]; then
    tar -xf deps.tar -C /tmp/parts
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site /tmp/parts/deps/*.whl
    touch /tmp/site/.deps_done
  fi
  for s in _C_stable_libtorch _moe_C_stable_libtorch; do
    if [ -f $s.so.xz ] && [ ! -f /tmp/site/vllm/$s.abi3.so ]; then mkdir -p /tmp/site/vllm
      xz -T0 -dc $s.so.xz > /tmp/site/vllm/$s.abi3.so.tmp && mv /tmp/site/vllm/$s.abi3.so.tmp /tmp/site/vllm/$s.abi3.so; fi
  done
  if [ -f _vllm_fa3_C.so.xz ] && [ ! -f /tmp/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so ]; then mkdir -p /tmp/site/vllm/vllm_flash_attn
    xz -T0 -dc _vllm_fa3_C.so.xz > /tmp/site/vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so; fi
  # xgrammar 0.2.8 needs apache-tvm-ffi 0.1.11 (vLLM 0.26.0 pins 0.1.10): install it last
  for w in /tmp/parts/apache_tvm_ffi-0.1.11*.whl; do [ -f "$w" ] && [ -f /tmp/site/.deps_done ] && [ ! -f /tmp/site/.fix_done ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$w" && touch /tmp/site/.fix_done; done
  ls /tmp/site/vllm/*.so /tmp/site/vllm/vllm_flash_attn/*.so 2>/dev/null; du -sh /tmp/site; echo "install $(( $(date +%s) - T0 ))s" ;;
queue)
  export PYTHONPATH=/tmp/site
  touch /tmp/gpu-done /tmp/gpu-times
  named=""; if [ $# -gt 0 ]; then cases="$*"; named=1; else
    cases=$(python3 -c "import json;print(' '.join(k for k in json.load(open('$H/cases.json')) if not k.startswith('_')))"); fi
  ran=()
  for c in $cases; do
    [ -n "$named" ] || ! grep -qx "$c" /tmp/gpu-done || continue
    spec=$(python3 -c "import json;print(json.dumps(json.load(open('$H/cases.json'))['$c']))")
    m=$(python3 -c "import json,sys;print(json.loads(sys.argv[1])['model'])" "$spec")
    eager=$(python3 -c "import json,sys;d=json.loads(sys.argv[1]);print(int(d.get('kwargs',{}).get('enforce_eager',False)))" "$spec")
    last=$(awk -v m=$m -v e=$eager '$1==m && $2==e {t=$3} END {print t+0}' /tmp/gpu-times)
    need=$(( last > 0 ? last * 13 / 10 + 15 : (eager == 1 ? 100 : 200) )); fl=$(( eager == 1 ? 60 : 90 )); [ $need -lt $fl ] && need=$fl
    left=$(( BUDGET - ( $(date +%s) - T0 ) ))
    if [ $left -lt $need ]; then echo "STOP before $c: ${left}s left, needs ~${need}s"; break; fi
    to=$(( left < 330 ? left : 330 ))
    # the GPU must be free of the previous engine before a new one profiles memory
    for i in $(seq 30); do u=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1); [ "$u" -lt 2000 ] && break; sleep 1; done
    now=$(date +%s); echo "=== $c model=$m timeout=${to}s gpu_used=${u}MiB $(date -u +%H:%M:%S)"
    # a probe case mounts the bundle the way the README says: a read-only folder first on PYTHONPATH
    pp=/tmp/site; probe=""
    if python3 -c "import json,sys;sys.exit(0 if json.loads(sys.argv[1]).get('probe') else 1)" "$spec"; then
      probe=1; rm -rf /tmp/recon-probe-logs /opt/recon-probe; mkdir -p /tmp/recon-probe-logs
      cp -r $H/../../.gpu-engine/probe /opt/recon-probe && chmod -R a-w /opt/recon-probe
      pp=/opt/recon-probe:/tmp/site; fi
    if python3 -c "import json,sys;sys.exit(0 if 'serve' in json.loads(sys.argv[1]) else 1)" "$spec"; then
      xa=$(python3 -c "import json,sys;print(' '.join(json.loads(sys.argv[1])['serve']))" "$spec")
      PYTHONPATH=$pp SERVE_WAIT=$((to - 40)) timeout -k 10 $to python3 $H/serve_engine.py $c $H/models/$m 8011 $OUT/$c.log $xa
    else
      kw=$(python3 -c "import json,sys;print(json.dumps(json.loads(sys.argv[1])['kwargs']))" "$spec")
      PYTHONPATH=$pp timeout -k 10 $to python3 $H/run_engine.py $c $H/models/$m "$kw" > $OUT/$c.log 2>&1
    fi
    rc=$?; dt=$(( $(date +%s) - now ))
    echo "$c" >> /tmp/gpu-done; echo "$m $eager $dt $c" >> /tmp/gpu-times; ran+=($c)
    echo "rc=$rc after ${dt}s"
    grep -aE "block size|Padding mamba|mamba_cache_mode|Available KV cache memory|GPU KV cache size|Maximum concurrency|Graph capturing finished|CUDA graph pool memory|cudagraph_capture_sizes=|Application startup complete|^OUT |TIMING|Error|error:" $OUT/$c.log | grep -v "^\s*$" | cut -c1-400 | tail -14
    if [ -n "$probe" ]; then ls -la /tmp/recon-probe-logs; tar -czf $OUT/probe-$c.tgz -C /tmp recon-probe-logs; fi
  done
  if [ ${#ran[@]} -gt 0 ]; then (cd $OUT && tar -czf logs-$(date +%H%M%S).tgz $(for c in "${ran[@]}"; do echo $c.log; done) && rm -f $(for c in "${ran[@]}"; do echo $c.log; done)); fi
  ls -la $OUT; echo "done: $(tr '\n' ' ' < /tmp/gpu-done)"; echo "call ${BUDGET}s budget, used $(( $(date +%s) - T0 ))s" ;;
esac
