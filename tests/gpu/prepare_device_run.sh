#!/usr/bin/env bash
# From a clean checkout (after `make .venv/bin/.installed`, with the package registry and sglang's release
# reachable here): everything tests/gpu/run_toy_campaign_on_device.sh carries to the lent GPU, which reaches
# neither.  Run from the project root; then, with the `device` tool, carry [".whl", ".gpu"] and run
# `bash tests/gpu/run_toy_campaign_on_device.sh`.
#   .whl/   the wheels of tests/gpu/device-wheels.txt (cp312 manylinux) and antlr4's source archive (no wheel)
#   .gpu/   sglang-0.5.20.tar.xz (the release's `sglang` package, from the pipeline's source stage),
#           patched/ (the files the pipeline's patch stage changed for patches/eagle_topk, at their tree paths),
#           gsm8k-test.jsonl (GSM8K's test set, held to conf/config.yaml's sha256)
# (The CPU campaign: its arms read GSM8K only and apply the same series.)
# Both folders are ignored by git (.git/info/exclude), as the device tool's README asks for carried paths.
set -euo pipefail
cd "$(dirname "$0")/../.."
for d in .whl .gpu; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
tests/gpu/fetch_device_wheels.sh
python3 -m pip download -q --no-deps --no-binary=:all: antlr4-python3-runtime==4.9.3 -d .whl

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results
echo "the datasets, source and patch stages of the real DAG (results in $results)"
.venv/bin/specrepro run experiment=eagle_topk_cpu results_dir="$results" -- "$results/datasets/gsm8k.json" \
  "$results/patch/v0.5.20/eagle_topk/manifest.json"
source_tree=$(readlink -f "$results/source/v0.5.20/tree")
patched_tree=$(readlink -f "$results/patch/v0.5.20/eagle_topk/tree")

rm -rf .gpu && mkdir -p .gpu/patched
tar -cJf .gpu/sglang-0.5.20.tar.xz -C "$source_tree" sglang
# the files the series changed, at their paths in the tree
(cd "$patched_tree" && find sglang -type f ! -name '*.pyc' -print0) | while IFS= read -r -d '' f; do
  if ! cmp -s "$patched_tree/$f" "$source_tree/$f"; then
    mkdir -p ".gpu/patched/$(dirname "$f")" && cp "$patched_tree/$f" ".gpu/patched/$f"
    echo "patched: $f"
  fi
done

# where the datasets stage found GSM8K's test set (fetched and held to its sha256, or SPECREPRO_DATA_DIR's copy)
.venv/bin/python -c 'import json, shutil, sys; shutil.copy(json.load(open(sys.argv[1]))["path"], ".gpu/gsm8k-test.jsonl")' \
  "$results/datasets/gsm8k.json"
du -sh .whl .gpu
echo "carried: $(du -scm .whl .gpu | tail -1 | cut -f1) MiB of the device tool's 64 MiB"
