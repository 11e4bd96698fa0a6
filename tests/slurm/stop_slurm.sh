#!/usr/bin/env bash
# Stop the test Slurm started by start_slurm.sh SCRATCH_DIR and remove the config
# it installed, so Slurm clients (and Snakemake's Slurm plugin) fail fast
# instead of waiting for a controller that is gone.
scratch=$(realpath "$1")
for d in slurmd slurmctld; do
  [ -f "$scratch/run/$d.pid" ] && kill "$(cat "$scratch/run/$d.pid")" 2>/dev/null
done
sleep 1
pkill -f "slurmscriptd" 2>/dev/null
if grep -qs "ClusterName=specrepro-test" /etc/slurm/slurm.conf; then
  rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf
fi
exit 0
