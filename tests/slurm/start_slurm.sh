#!/usr/bin/env bash
# A one-node Slurm for tests: slurmctld + slurmd on this host, 4 placeholder GPUs as gres.
# Usage: start_slurm.sh SCRATCH_DIR   (as root; needs Debian's slurm-wlm and munge)
# Prints the environment to use (SLURM_CONF=...).
set -euo pipefail
scratch=$(realpath "$1")
mkdir -p "$scratch"/{state,spool,log,run}
host=$(hostname -s)
cpus=$(nproc)
mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))

# munge: one key, one daemon
if ! pgrep -x munged >/dev/null; then
  mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 400 /etc/munge/munge.key
  runuser -u munge -- munged
fi
munge -n | unmunge >/dev/null

for i in 0 1 2 3; do : > "$scratch/gpu$i"; done
cat > "$scratch/gres.conf" <<CONF
NodeName=$host Name=gpu File=$scratch/gpu[0-3]
CONF
cat > "$scratch/slurm.conf" <<CONF
ClusterName=specrepro-test
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MinJobAge=600
ReturnToService=2
StateSaveLocation=$scratch/state
SlurmdSpoolDir=$scratch/spool
SlurmctldPidFile=$scratch/run/slurmctld.pid
SlurmdPidFile=$scratch/run/slurmd.pid
SlurmctldLogFile=$scratch/log/slurmctld.log
SlurmdLogFile=$scratch/log/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem_mb Gres=gpu:4 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
# Job steps (srun inside a batch job) read the default location, whatever the
# submitting environment said: install there, unless a real Slurm owns it.
mkdir -p /etc/slurm
if [ -f /etc/slurm/slurm.conf ] && ! grep -q "ClusterName=specrepro-test" /etc/slurm/slurm.conf; then
  echo "/etc/slurm/slurm.conf belongs to another Slurm; not touching it" >&2
  exit 1
fi
cp "$scratch/slurm.conf" "$scratch/gres.conf" /etc/slurm/
export SLURM_CONF=/etc/slurm/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 1 60); do
  if sinfo -h -o "%T" 2>/dev/null | grep -qE "^(idle|mixed|allocated)"; then
    echo "SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 1
done
echo "slurm did not come up; sinfo: $(sinfo 2>&1)" >&2
tail -20 "$scratch/log/slurmctld.log" "$scratch/log/slurmd.log" >&2
exit 1
