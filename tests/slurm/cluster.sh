#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost, for the tests (needs root and apt).
#   cluster.sh start STATE_DIR   install (once), configure and start munged, slurmctld,
#                                slurmd; wait until the node is idle
#   cluster.sh stop STATE_DIR    stop the daemons started by `start` (by PID)
# Exit status 3: SLURM cannot be installed; 4: this machine already has another SLURM.
# Partitions: debug (default) and gpu, one node with two fake GPUs (GRES on /dev/null and
# /dev/zero), no accounting (the profile polls with squeue).
set -euo pipefail
action=$1
state=$(realpath -m "$2")
mkdir -p "$state"

stop() {
    for name in slurmd slurmctld munged; do
        if [ -f "$state/$name.pid" ]; then
            kill "$(cat "$state/$name.pid")" 2>/dev/null || true
            rm -f "$state/$name.pid"
        fi
    done
}

if [ "$action" = stop ]; then
    stop
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || exit 3
    apt-get install -y -qq --no-install-recommends munge slurmctld slurmd slurm-client \
        >/dev/null || exit 3
fi
stop
# Never touch a real cluster's configuration (status 4: the tests skip, saying why); the
# daemons of an earlier test cluster are stopped before starting anew.
if [ -f /etc/slurm/slurm.conf ] && ! grep -q '^ClusterName=layerlaws-test$' /etc/slurm/slurm.conf; then
    echo "/etc/slurm/slurm.conf belongs to another SLURM; not replacing it" >&2
    exit 4
fi
pkill -x slurmd 2>/dev/null || true
pkill -x slurmctld 2>/dev/null || true
pkill -x munged 2>/dev/null || true
sleep 1

host=$(hostname -s)
cpus=$(nproc)
memory=$(( $(free -m | awk '/^Mem:/ {print $2}') * 90 / 100 ))
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=layerlaws-test
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
MailProg=/bin/true
DefMemPerCPU=1000
MinJobAge=300
SchedulerType=sched/backfill
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$state/slurmctld.slurmpid
SlurmdPidFile=$state/slurmd.slurmpid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=$host CPUs=$cpus RealMemory=$memory Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP
CONF
cat > /etc/slurm/gres.conf <<CONF
NodeName=$host Name=gpu File=/dev/null
NodeName=$host Name=gpu File=/dev/zero
CONF
chown munge:munge /run/munge
[ -f /etc/munge/munge.key ] || (command -v mungekey >/dev/null && mungekey --create) \
    || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
su -s /bin/sh munge -c /usr/sbin/munged
cp /run/munge/munged.pid "$state/munged.pid" 2>/dev/null || pgrep -n -x munged > "$state/munged.pid"
slurmctld -D > "$state/slurmctld.out" 2>&1 &
echo $! > "$state/slurmctld.pid"
slurmd -D > "$state/slurmd.out" 2>&1 &
echo $! > "$state/slurmd.pid"
for _ in $(seq 60); do
    if [ "$(sinfo -h -N -o %t 2>/dev/null | head -n 1)" = idle ]; then
        echo "SLURM node $host is idle"
        exit 0
    fi
    sleep 1
done
echo "SLURM did not become idle; logs in $state" >&2
sinfo -N -l >&2 || true
tail -n 20 "$state/slurmctld.log" "$state/slurmd.log" >&2 || true
exit 1
