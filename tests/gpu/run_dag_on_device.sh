#!/usr/bin/env bash
# On the lent GPU machine only (the `device` tool; carry [".whl", ".gpu"], made by tests/gpu/prepare_device_run.sh):
# the toy GPU experiment through `specrepro run` -- the real Snakemake DAG, its launch rounds, MLflow and the report --
# on platform tests/gpu/conf/platform/gpu_local_lent.yaml (conf/platform/gpu_local.yaml with the compiled sglang
# kernels the machine lacks stood in for), offline, `experiment.launches={min: 2, max: 3}`.
#
# It resumes the results folder whose CPU stages (source, patch, patch_check) ran where the registry is reachable
# (.gpu/): their outputs are put back at the paths they were made for, newer than their inputs, so Snakemake runs
# everything after them here.  A server is killed mid-benchmark on purpose (pr_rs_on's first launch, the third of
# round 1, once its first GSM8K repeat has begun): that run stops with the stage's error and the server log's tail;
# the same command run again measures only what is missing.  nvidia-smi samples the GPU's memory every second.
# A call that reaches BUDGET_S stops the run as Ctrl-C would; a later call that carries .gpu-resume/ (this call's
# records.tar.gz in it) puts those records back, as newer than the CPU stages', and the DAG goes on where it stopped.
#
# Into $OUT (at most 8 files): run1.log, run2.log (the two runs' output), gpu.txt (machine, versions, timings),
# gpu_memory.csv (the samples), kill.txt (what was killed when), launch_records.txt (each launch record's mtime
# after each run) and records.tar.gz (the results folder without the sglang trees and the model).
# The same script runs on a CPU in CI (tests/test_device_run_cpu.py): CPU_TEST=1 (no nvidia-smi), PYTHON (the
# interpreter that holds sglang's dependencies), CPU_PLATFORM, WHEELS and CARRIED (the folders .whl and .gpu stand
# for), DEVICE_BASE (where it works), EXTRA_OVERRIDES.  BUDGET_S (default 540): the script's wall-clock limit.
set -uo pipefail
started=$(date +%s)
budget=${BUDGET_S:-520}
out=${OUT:-/tmp/out}
mkdir -p "$out"
root=$PWD
base=${DEVICE_BASE:-/tmp/specrepro-device}
results=$base/results
python=${PYTHON:-python3}
wheels=${WHEELS:-.whl}
carried=${CARRIED:-.gpu}
resume=${RESUME:-.gpu-resume/records.tar.gz}
export PYTHONUNBUFFERED=1 SPECREPRO_ROOT=$root
# sglang's modules compiled once into the trees' __pycache__ (by the image jobs' environment check), not again by
# every server launch
unset PYTHONDONTWRITEBYTECODE
# the wheels, into a folder ahead of the interpreter's own packages (not a venv: the interpreter keeps its torch)
site=$base/site
rm -rf "$site" && mkdir -p "$site"
"$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$wheels"/*.whl \
  || { echo "installing the carried wheels failed" | tee "$out/gpu.txt"; exit 1; }
# specrepro itself from this checkout (what the call carried), never a wheel made before a later change
export PYTHONPATH=$site:$root/src
platform=${CPU_PLATFORM:-gpu_local_lent}

# the CPU stages' outputs, as the patch stage leaves them: the release's tree, and a copy with the series' files
rm -rf "$results" && mkdir -p "$results/source/v0.5.20/tree" "$results/patch/v0.5.20/eagle_topk/tree"
tar -xJf "$carried/sglang-0.5.20.tar.xz" -C "$results/source/v0.5.20/tree"
cp -a "$results/source/v0.5.20/tree/." "$results/patch/v0.5.20/eagle_topk/tree/"
cp -a "$carried/patched/." "$results/patch/v0.5.20/eagle_topk/tree/"
cp -a "$carried/stages/." "$results/"
# Snakemake reruns a job whose inputs are newer than its outputs: the CPU stages' outputs get times just after the
# newest file of this checkout (their inputs), in the DAG's order, and an earlier call's records after them, in
# their own order -- all in the past, so what this run writes is newer still
t=$(find . -path ./.git -prune -o -type f -printf '%T@\n' | sort -n | tail -1); t=${t%.*}
for stage in source patch patch_check; do
  t=$((t + 1)); find "$results/$stage" "$results/logs/$stage" -exec touch -h -d "@$t" {} +
done
while [ "$(date +%s)" -le $((t + 2)) ]; do sleep 1; done
if [ -f "$resume" ]; then
  cpu_stages=(results/source results/patch results/patch_check results/logs/source results/logs/patch
    results/logs/patch_check)
  tar -xzf "$resume" -C "$base" "${cpu_stages[@]/#/--exclude=}"
  tar -tzf "$resume" "${cpu_stages[@]/#/--exclude=}" | "$python" -c '
import os, sys
base, after = sys.argv[1], float(sys.argv[2])
paths = [p for p in (os.path.join(base, line.rstrip("\n")) for line in sys.stdin) if os.path.lexists(p)]
for rank, p in enumerate(sorted(paths, key=lambda p: os.lstat(p).st_mtime)):
    os.utime(p, (after + rank / 1000, after + rank / 1000), follow_symlinks=False)
' "$base" "$((t + 1))"
  while [ "$(date +%s)" -le $((t + 1 + $(tar -tzf "$resume" | wc -l) / 1000 + 1)) ]; do sleep 1; done
  echo "resumed from $resume"
fi

overrides=(experiment=eagle_topk_toy_gpu "platform=$platform" "hydra.searchpath=[file://$root/tests/gpu/conf]"
  "results_dir=$results" "cache_dir=$base/cache" "data.gsm8k.path=$(readlink -f "$carried/gsm8k-test.jsonl")" offline=true
  sglang.source=registry gpu_check.enabled=never "experiment.launches={min: 2, max: 3}" ${EXTRA_OVERRIDES:-})
{ if [ -z "${CPU_TEST:-}" ]; then nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; fi
  "$python" -c 'import sys, torch, triton; print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__, "python", sys.version.split()[0])'
  nproc; } > "$out/gpu.txt" 2>&1
cat "$out/gpu.txt"
if [ -z "${CPU_TEST:-}" ]; then
  # epoch seconds (launches.jsonl's clock), GPU index, MiB used, MiB total
  ( echo "epoch_s,index,memory_used_mib,memory_total_mib"
    while :; do nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits \
      | sed "s/^/$(date +%s.%N),/; s/ //g"; sleep 1; done ) > "$out/gpu_memory.csv" 2>&1 &
  sampler=$!
fi

# `specrepro run` in its own session, stopped by SIGINT (a user's Ctrl-C) if it would outlast the budget
run() {
  local log=$1
  local left=$((started + budget - $(date +%s)))
  [ "$left" -gt 10 ] || { echo "not started: the budget ($budget s) is spent" > "$log"; return 124; }
  setsid "$python" -m specrepro.cli run "${overrides[@]}" > "$log" 2>&1 &
  local pid=$!
  # the guard is a process group of its own, ended whole (its sleep too), holding none of this script's output
  setsid bash -c 'sleep "$1" && kill -INT -- "-$2"' guard "$left" "$pid" < /dev/null > /dev/null 2>&1 &
  local guard=$!
  wait "$pid"; local rc=$?
  kill -- "-$guard" 2>/dev/null; wait "$guard" 2>/dev/null
  [ "$rc" -eq 0 ] || [ "$(( $(date +%s) - started ))" -lt "$budget" ] || echo "stopped at the budget ($budget s)" >> "$log"
  return $rc
}
records() { (cd "$results" && find arms -path '*/launches/*.json' -printf '%p %T@\n' 2>/dev/null | sort); }

# the server of pr_rs_on's first launch (the third of round 1), killed as its first GSM8K repeat runs; not again
# on a resumed call that has its record
kill_target=$results/arms/pr_rs_on/launch1/gsm8k/r1
( [ -e "$results/arms/pr_rs_on/launches/1.json" ] && exit 0
  while [ ! -d "$kill_target" ]; do sleep 0.05; done; sleep 0.3
  "$python" - "$base/cache/models" <<'PY' > "$out/kill.txt" 2>&1
import os, signal, sys, time
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        continue
    if f"--model-path {sys.argv[1]}" in cmd:
        os.killpg(os.getpgid(int(pid)), signal.SIGKILL)
        print(f"{time.time():.3f} killed the process group of server {pid} with SIGKILL: {cmd[:300]}")
PY
) &
killer=$!

t0=$(date +%s)
run "$out/run1.log"; rc1=$?
t1=$(date +%s)
kill "$killer" 2>/dev/null
{ echo "# after run 1 (exit $rc1)"; records; } > "$out/launch_records.txt"
tail -30 "$out/run1.log"
run "$out/run2.log"; rc2=$?
t2=$(date +%s)
{ echo "# after run 2 (exit $rc2)"; records; } >> "$out/launch_records.txt"
tail -40 "$out/run2.log"
sleep 2
[ -n "${sampler:-}" ] && kill "$sampler" 2>/dev/null
echo "run 1 (server killed) exit $rc1 after $((t1 - t0)) s; run 2 exit $rc2 after $((t2 - t1)) s; script $(( $(date +%s) - started )) s" \
  | tee -a "$out/gpu.txt"
tar -czf "$out/records.tar.gz" --exclude='source/*/tree' --exclude='patch/*/*/tree' \
  --exclude='mlartifacts' -C "$base" results cache/models
ls -la "$out"
exit 0
