#!/usr/bin/env bash
# What the CPU stages of the real DAG left in RESULTS (source, patch and patch_check of sglang 0.5.20 with the
# eagle_topk series, and the datasets stage's GSM8K), packed into DEST for tests/gpu/run_dag_on_device.sh to put back:
#   sglang-0.5.20.tar.xz   the `sglang` package of the source stage's tree (the release)
#   patched/               the files the patch stage changed, at their paths in the tree
#   stages/                the stages' manifests, the patch_check verdict and the stages' logs, at their results paths
#   gsm8k-test.jsonl       GSM8K's test set where the datasets stage found it (held to its sha256), or GSM8K_FILE
#     tests/gpu/pack_cpu_stages.sh RESULTS DEST [GSM8K_FILE]
set -euo pipefail
results=$1 dest=$2
source_tree=$(readlink -f "$results/source/v0.5.20/tree")
patched_tree=$(readlink -f "$results/patch/v0.5.20/eagle_topk/tree")
rm -rf "$dest" && mkdir -p "$dest/patched" "$dest/stages"
XZ_OPT=${XZ_OPT:--9} tar -cJf "$dest/sglang-0.5.20.tar.xz" -C "$source_tree" sglang
(cd "$patched_tree" && find sglang -type f ! -name '*.pyc' -print0) | while IFS= read -r -d '' f; do
  if ! cmp -s "$patched_tree/$f" "$source_tree/$f"; then
    mkdir -p "$dest/patched/$(dirname "$f")" && cp "$patched_tree/$f" "$dest/patched/$f"
    echo "patched: $f"
  fi
done
(cd "$results" && tar -cf - source/v0.5.20/manifest.json patch/v0.5.20/eagle_topk/manifest.json \
  patch_check/v0.5.20/eagle_topk/verdict.json patch_check/v0.5.20/eagle_topk/verdict.md logs/source logs/patch \
  logs/patch_check) | tar -xf - -C "$dest/stages"
if [ -n "${3:-}" ]; then cp "$3" "$dest/gsm8k-test.jsonl"; else
  python3 -c 'import json, shutil, sys; shutil.copy(json.load(open(sys.argv[1]))["path"], sys.argv[2])' \
    "$results/datasets/gsm8k.json" "$dest/gsm8k-test.jsonl"
fi
