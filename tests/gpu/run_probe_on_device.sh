#!/usr/bin/env bash
# Tests on a lent GPU only (the `device` tool): the gpu_check probe, unmodified,
# on sglang 0.5.20's real source with the machine's own torch, for three trees:
#   patched    the release with the patch series applied (the patched arms' code)
#   unpatched  the release as is (the control: the bug must show)
#   mixed      the release's graph runner under the patched proposal and worker
#              call (a producer half left out: the server must fail at capture)
# Carried: .whl/ (dependencies of sglang's import chain the machine lacks, as
# cp312 wheels), .gpu/sglang-0.5.20.tar.xz (the release's `sglang` package) and
# .gpu/patched/ (the three files the patch series changes).  Compiled CUDA
# packages the chain names and the machine lacks are import-only placeholders
# (tests/gpu/placeholders), each listed in placeholders.txt.
set -euo pipefail
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/t/unpatched /tmp/t/patched /tmp/t/mixed
tar -xJf .gpu/sglang-0.5.20.tar.xz -C /tmp/t/unpatched
cp -a /tmp/t/unpatched/. /tmp/t/patched/
cp -a .gpu/patched/. /tmp/t/patched/
cp -a /tmp/t/unpatched/. /tmp/t/mixed/
cp .gpu/patched/sglang/srt/speculative/{spec_utils,eagle_worker_v2}.py /tmp/t/mixed/sglang/srt/speculative/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
python3 -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])' | tee -a "$out/gpu.txt"
placeholders=sgl_kernel,flashinfer
for tree in patched unpatched mixed; do
  for attempt in 1 2 3 4 5 6 7 8; do
    start=$(date +%s)
    if SPECREPRO_PLACEHOLDER_MODULES=$placeholders PYTHONPATH="tests/gpu/placeholders:/tmp/t/$tree:/tmp/site" \
        python3 patches/eagle_topk/checks/probe_gpu.py --out "$out/probe_$tree.json" --greedy-rows 4096 \
        --replays 2000 --runner-replays 1000 > "$out/probe_$tree.log" 2>&1; then
      echo "$tree: $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
      break
    fi
    missing=$(grep -oP "No module named '\K[^'.]+" "$out/probe_$tree.log" | tail -1 || true)
    [ -n "$missing" ] || { echo "$tree: the probe failed"; tail -30 "$out/probe_$tree.log"; continue 2; }
    echo "placeholder added for $missing"; placeholders="$placeholders,$missing"
  done
  echo "$tree: $placeholders" >> "$out/placeholders.txt"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); g=r.get('graph_runner') or {}; print(sys.argv[2], 'eager', r['eager']['greedy'], 'runner', g.get('error') or [(c['rows'], c['padded_to'], c['greedy_missed'], c['greedy_rows'], c['sampled_missed'], c['sampled_rows']) for c in g['replays']])" "$out/probe_$tree.json" "$tree"
done
