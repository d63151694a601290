#!/usr/bin/env bash
# A real single-node SLURM cluster on localhost for the tests, that leaves the machine as
# it found it (needs root and apt).
#   cluster.sh start STATE_DIR   install the packages that are missing, write
#                                /etc/slurm/slurm.conf and gres.conf, start munged (unless
#                                it runs), slurmctld and slurmd; wait until the node is idle
#   cluster.sh stop STATE_DIR    stop what start started, remove the files it created and
#                                purge the packages the install added: those listed when it
#                                completed or, for an install that failed or was killed
#                                half-way, every package new since the record taken in
#                                STATE_DIR before apt-get ran
# The configuration must be in /etc/slurm: the jobs' nested srun drops SLURM_CONF. State,
# spool and logs are in STATE_DIR. A configuration of another SLURM is never replaced.
# Exit status 3: SLURM cannot be installed; 4: this machine has a SLURM of its own.
# Partitions: debug (default) and gpu, as profiles/slurm and execution.gpu_partition name
# them; one node with two fake GPUs (GRES on /dev/null and /dev/zero) and at least 8 CPUs;
# no accounting (the profile polls with squeue).
set -euo pipefail
action=$1
state=$(realpath -m "$2")
mkdir -p "$state"
PACKAGES=(munge slurmctld slurmd slurm-client)

# Packages dpkg holds in any state but not-installed (half-installed and config-files
# included): "name:arch version", sorted.
present() {
    dpkg-query -W -f='${db:Status-Abbrev} ${binary:Package} ${Version}\n' 2>/dev/null \
        | awk 'substr($1, 2, 1) != "n" {print $2, $3}' | sort
}

# Names of the packages present now that were not when packages-before was recorded.
new_packages() {
    present | awk '{print $1}' | sort -u \
        | comm -13 <(awk '{print $1}' "$state/packages-before" | sort -u) -
}

# Purge what the install added: the list written when it completed or, for an install that
# failed or was killed half-way, whatever is new since packages-before.
purge_new_packages() {
    [ -f "$state/packages-before" ] || return 0
    local new
    if [ -f "$state/installed-packages" ]; then
        new=$(cat "$state/installed-packages")
    else
        new=$(new_packages)
        # An install killed half-way leaves dpkg "interrupted"; apt-get refuses until this.
        [ -z "$new" ] || dpkg --configure -a >/dev/null 2>&1 || true
    fi
    if [ -n "$new" ]; then
        export DEBIAN_FRONTEND=noninteractive
        # shellcheck disable=SC2086
        apt-get purge -y -qq $new >/dev/null 2>&1 || dpkg --purge $new >/dev/null 2>&1 || true
    fi
    rm -f "$state/packages-before" "$state/installed-packages"
}

stop() {
    if [ ! -f "$state/munged.pid" ] && [ -f "$state/starting-munged" ] && [ -f /run/munge/munged.pid ]; then
        cp /run/munge/munged.pid "$state/munged.pid"
    fi
    rm -f "$state/starting-munged"
    for name in slurmd slurmctld munged; do
        if [ -f "$state/$name.pid" ]; then
            pid=$(cat "$state/$name.pid")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            rm -f "$state/$name.pid"
        fi
    done
    if [ -f "$state/created-paths" ]; then
        xargs -r rm -rf < "$state/created-paths"
        rm -f "$state/created-paths"
    fi
    purge_new_packages
}

if [ "$action" = stop ]; then
    stop
    exit 0
fi

if pgrep -x slurmctld >/dev/null || pgrep -x slurmd >/dev/null; then
    echo "SLURM daemons already run on this machine; not starting another cluster" >&2
    exit 4
fi
if [ -f /etc/slurm/slurm.conf ] && ! grep -q '^ClusterName=layerlaws-test$' /etc/slurm/slurm.conf; then
    echo "/etc/slurm/slurm.conf belongs to another SLURM; not replacing it" >&2
    exit 4
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    # Recorded before apt-get runs: whatever is new after it is ours to purge.
    present > "$state/packages-before"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || exit 3
    apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null || exit 3
    new_packages > "$state/installed-packages"
fi

if ! pgrep -x munged >/dev/null; then
    if [ ! -d /run/munge ]; then
        mkdir -p /run/munge && echo /run/munge >> "$state/created-paths"
    fi
    chown munge:munge /run/munge
    if [ ! -f /etc/munge/munge.key ]; then
        mungekey --create 2>/dev/null || dd if=/dev/urandom bs=1 count=1024 \
            of=/etc/munge/munge.key 2>/dev/null
        echo /etc/munge/munge.key >> "$state/created-paths"
        chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    fi
    touch "$state/starting-munged"
    su -s /bin/sh munge -c /usr/sbin/munged
    cp /run/munge/munged.pid "$state/munged.pid" 2>/dev/null \
        || pgrep -n -x munged > "$state/munged.pid"
fi

host=$(hostname -s)
# The shipped profile gives a model-running job its rule's threads (4) as CPUs; the node
# declares 8 (config_overrides: more than a 2-core machine has) so that both fake GPUs'
# jobs run at once.
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))
memory=$(( $(free -m | awk '/^Mem:/ {print $2}') * 90 / 100 ))
mkdir -p "$state/ctld" "$state/d"
[ -e /etc/slurm ] || echo /etc/slurm >> "$state/created-paths"
printf '%s\n' /etc/slurm/slurm.conf /etc/slurm/gres.conf >> "$state/created-paths"
mkdir -p /etc/slurm
cat > /etc/slurm/slurm.conf <<CONF
ClusterName=layerlaws-test
SlurmctldHost=$host
SlurmctldPort=16817
SlurmdPort=16818
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
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$state/slurmctld.slurmpid
SlurmdPidFile=$state/slurmd.slurmpid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus RealMemory=$memory Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP
CONF
cat > /etc/slurm/gres.conf <<CONF
NodeName=$host Name=gpu File=/dev/null
NodeName=$host Name=gpu File=/dev/zero
CONF
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
