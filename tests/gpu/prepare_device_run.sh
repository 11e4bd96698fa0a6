#!/usr/bin/env bash
# From a clean checkout (after `make .venv/bin/.installed`, with the package registry reachable here): everything
# tests/gpu/run_dag_on_device.sh carries to the lent GPU machine, which reaches no registry.  Run from the project
# root; then, with the `device` tool, carry [".whl", ".gpu"] and run `bash tests/gpu/run_dag_on_device.sh`.
#   .whl/   the wheels of tests/gpu/device-wheels.txt for PYTHON_VERSION (default 3.12, the lent machine's), those
#           with no wheel built here from their source archives (specrepro itself is the checkout's src/, which
#           travels with every call: a wheel made here would go stale at the next change)
#   .gpu/   what the CPU stages of the real DAG made here, for the device run to resume: the source stage's release
#           (sglang-0.5.20.tar.xz, the `sglang` package of its tree), the files the patch stage changed (patched/),
#           the stages' manifests, the patch_check verdict and logs (stages/), and GSM8K's test set as the datasets
#           stage verified it (gsm8k-test.jsonl).  Those stages ran with results_dir=/tmp/specrepro-device/results,
#           the path the device run uses, so the records name the paths they will have there.
# Both folders are ignored by git (.git/info/exclude), as the device tool's README asks for carried paths.
set -euo pipefail
cd "$(dirname "$0")/../.."
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for d in .whl .gpu .gpu-resume; do grep -qx "/$d/" "$exclude" 2>/dev/null || echo "/$d/" >> "$exclude"; done
rm -rf .whl
tests/gpu/fetch_device_wheels.sh

results=/tmp/specrepro-device/results
rm -rf "$results"
echo "the datasets, source, patch and patch_check stages of the real DAG (results in $results)"
.venv/bin/specrepro run experiment=eagle_topk_toy_gpu platform=gpu_local_lent \
  "hydra.searchpath=[file://$PWD/tests/gpu/conf]" results_dir="$results" -- "$results/datasets/gsm8k.json" \
  "$results/patch_check/v0.5.20/eagle_topk/verdict.json"
tests/gpu/pack_cpu_stages.sh "$results" .gpu
du -sh .whl .gpu
tracked=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
carried=$(du -scb .whl .gpu | tail -1 | cut -f1)
echo "travels: tracked files $((tracked / 1048576)) MiB + carried $((carried / 1048576)) MiB = $(((tracked + carried) / 1048576)) MiB of the device tool's 64 MiB"
