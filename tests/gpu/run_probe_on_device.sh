#!/usr/bin/env bash
# Tests on a lent GPU only (the `device` tool): the gpu_check probe, unmodified,
# on sglang 0.5.20's real source, patched and unpatched, with the machine's own
# torch.  Carried: .whl/ (pure-Python and small compiled dependencies of
# sglang's import chain, as wheels), .gpu/sglang-0.5.20.tar.xz (the release's
# source) and .gpu/patched/ (the three files the patch series changes, from the
# patch stage).  Compiled CUDA packages the chain names and the machine lacks
# are import-only placeholders (tests/gpu/placeholders); each is listed.
set -euo pipefail
out=${OUT:-/tmp/out}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
mkdir -p /tmp/t/unpatched /tmp/t/patched
tar -xJf .gpu/sglang-0.5.20.tar.xz -C /tmp/t/unpatched
cp -a /tmp/t/unpatched/. /tmp/t/patched/
cp -a .gpu/patched/. /tmp/t/patched/
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
placeholders=sgl_kernel,flashinfer
for tree in patched unpatched; do
  for attempt in 1 2 3 4 5 6; do
    if SPECREPRO_PLACEHOLDER_MODULES=$placeholders PYTHONPATH="tests/gpu/placeholders:/tmp/t/$tree:/tmp/site" \
        python3 src/specrepro/gpu_check/probe_gpu.py --out "$out/probe_$tree.json" --greedy-rows 4096 --replays 2000 \
        > "$out/probe_$tree.log" 2>&1; then
      break
    fi
    missing=$(grep -oP "No module named '\K[^'.]+" "$out/probe_$tree.log" | tail -1 || true)
    [ -n "$missing" ] || { tail -30 "$out/probe_$tree.log"; exit 1; }
    echo "placeholder added for $missing"; placeholders="$placeholders,$missing"
  done
  echo "$tree: placeholders $placeholders"; echo "$placeholders" > "$out/placeholders_$tree.txt"
done
