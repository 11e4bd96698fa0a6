#!/usr/bin/env bash
# On a lent GPU only (the `device` tool): the toy campaign's arms on sglang 0.5.20's real server with
# CUDA graphs on and off, patched and unpatched, through the pipeline's serving code
# (tests/gpu/toy_campaign_on_device.py, platform tests/gpu/conf/platform/h200_bare.yaml).
# Carried (made by tests/gpu/prepare_device_run.sh): .whl/ (wheels and antlr4's source archive),
# .gpu/sglang-0.5.20.tar.xz (the release's `sglang` package), .gpu/patched/ (the files the patch stage changed),
# .gpu/gsm8k-test.jsonl (GSM8K test set).
set -euo pipefail
out=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
tar -xzf .whl/antlr4-python3-runtime-*.tar.gz -C /tmp && cp -r /tmp/antlr4-python3-runtime-*/src/antlr4 /tmp/site/
export PYTHONPATH=/tmp/site:$PWD/src
# analysis/ is installed as specrepro.analysis (pyproject's package-dir); the same, without an install
ln -sfn "$PWD/analysis" src/specrepro/analysis
rm -rf /tmp/toyrun
mkdir -p /tmp/t/unpatched /tmp/t/patched
tar -xJf .gpu/sglang-0.5.20.tar.xz -C /tmp/t/unpatched
cp -a /tmp/t/unpatched/. /tmp/t/patched/ && cp -a .gpu/patched/. /tmp/t/patched/
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c 'import torch, triton, sys; print("torch", torch.__version__, "triton", triton.__version__, "python", sys.version.split()[0])'; } | tee "$out/gpu.txt"
# Compiled packages the server's import chain names and the machine lacks become placeholders
# (tests/gpu/placeholders): found by importing what the server imports, one missing name at a time.
placeholders=sgl_kernel,flashinfer,deep_gemm
for attempt in $(seq 1 12); do
  if SPECREPRO_PLACEHOLDER_MODULES=$placeholders SPECREPRO_SERVER_STANDINS=1 SGLANG_IS_FLASHINFER_AVAILABLE=false \
      PYTHONPATH=tests/gpu/placeholders:/tmp/t/unpatched:$PYTHONPATH python3 -c 'import sglang.launch_server, sglang.srt.managers.scheduler, sglang.srt.speculative.eagle_worker_v2, sglang.srt.models.llama, sglang.srt.models.llama_eagle, sglang.srt.layers.attention.triton_backend, sglang.benchmark.serving' > /tmp/import.log 2>&1; then break; fi
  missing=$(grep -oP "No module named '\K[^'.]+" /tmp/import.log | tail -1 || true)
  [ -n "$missing" ] || { tail -30 /tmp/import.log; break; }
  echo "placeholder added for $missing"; placeholders="$placeholders,$missing"
done
echo "placeholders: $placeholders" | tee -a "$out/gpu.txt"
export SPECREPRO_PLACEHOLDER_MODULES=$placeholders
start=$(date +%s)
set +e
timeout ${CAMPAIGN_TIMEOUT:-540} python3 tests/gpu/toy_campaign_on_device.py --unpatched /tmp/t/unpatched \
  --patched /tmp/t/patched --gsm8k "$PWD/.gpu/gsm8k-test.jsonl" --results /tmp/toyrun/results "$@" > "$out/run.log" 2>&1
echo "campaign exit $? after $(( $(date +%s) - start )) s" | tee -a "$out/gpu.txt"
tail -40 "$out/run.log"
cp /tmp/toyrun/results/report/report.md "$out/" 2>/dev/null
tar -czf "$out/results.tar.gz" --exclude='*.parquet' -C /tmp/toyrun results
exit 0
