#!/usr/bin/env bash
# Stop the test Slurm started by start_slurm.sh SCRATCH_DIR.
scratch=$(realpath "$1")
for d in slurmd slurmctld; do
  [ -f "$scratch/run/$d.pid" ] && kill "$(cat "$scratch/run/$d.pid")" 2>/dev/null
done
exit 0
