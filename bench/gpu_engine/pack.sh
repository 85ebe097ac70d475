#!/bin/bash
# CPU machine: build the parts that bench/gpu_engine/dev.sh reassembles on the GPU machine.
# Run from the checkout root. Output: .gpu1 .gpu2 .gpu3 (each < 64 MiB, git-ignored via
# .git/info/exclude '/.gpu*/'). Engine code never enters git.
#   .gpu1: vllm/_C_stable_libtorch.so.xz
#   .gpu2: rest of the vllm wheel (tar.xz, minus FA2, vllm-rs, other-Python deep_gemm), FA3 .so.xz,
#          deps.tar (the wheels named in deps-carried.txt)
#   .gpu3: vllm/_moe_C_stable_libtorch.so.xz + apache-tvm-ffi 0.1.11 (xgrammar 0.2.8 needs it)
# Needs ~/.cache/recon/wheels/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl
# (pip download --no-deps vllm==0.26.0 -d ~/.cache/recon/wheels). XZ_LEVEL (default 6) and
# XZ_THREADS (default 2) trade CPU for size.
set -euo pipefail
H=$(cd "$(dirname "$0")" && pwd); S=$PWD; G=${WORK:-/tmp/gpu-engine-pack}
LV=${XZ_LEVEL:-6}; TH=${XZ_THREADS:-2}
W=~/.cache/recon/wheels/vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl
PL="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_5_x86_64"
mkdir -p $G/pk && cd $G
[ -d v26/vllm ] || { rm -rf v26; mkdir v26; (cd v26 && python3 -m zipfile -e $W .); }
cd v26
rm -rf bin vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so vllm/vllm-rs vllm/third_party/deep_gemm/_C.cpython-31[0134]-*.so
for f in vllm/_C_stable_libtorch.abi3.so vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so; do
  o=$G/pk/$(basename $f .abi3.so).so.xz; [ -s $o ] || xz -T$TH -$LV -c $f > $o; done
[ -s $G/pk/rest.tar.xz ] || tar -cf - --exclude=vllm/_C_stable_libtorch.abi3.so --exclude=vllm/_moe_C_stable_libtorch.abi3.so \
  --exclude=vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so vllm vllm-0.26.0.dist-info | xz -T$TH -$LV > $G/pk/rest.tar.xz
cd $G; mkdir -p deps fix
sed 's/ .*//' $H/deps-carried.txt | grep '\.whl$' | while read w; do
  [ -f deps/$w ] && continue
  n=$(echo $w | cut -d- -f1); v=$(echo $w | cut -d- -f2)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PL -d deps "$n==$v"
done
[ -n "$(ls fix/*.whl 2>/dev/null)" ] || python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $PL -d fix apache-tvm-ffi==0.1.11
rm -rf $S/.gpu1 $S/.gpu2 $S/.gpu3; mkdir -p $S/.gpu1 $S/.gpu2 $S/.gpu3
cp pk/_C_stable_libtorch.so.xz $S/.gpu1/
cp pk/rest.tar.xz pk/_vllm_fa3_C.so.xz $S/.gpu2/ && tar -cf $S/.gpu2/deps.tar deps
cp pk/_moe_C_stable_libtorch.so.xz fix/*.whl $S/.gpu3/
for n in 1 2 3; do (cd $S/.gpu$n && sha256sum * > ../.gpu$n.sha && mv ../.gpu$n.sha SHA256SUMS.$n); done
du -sm $S/.gpu1 $S/.gpu2 $S/.gpu3
