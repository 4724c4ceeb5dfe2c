#!/usr/bin/env bash
# A private Slurm cluster on localhost, for scripts/test-slurm.sh: its own
# munged (own key and socket), slurmctld and one slurmd per node (own
# ports chosen free, own state, spool and log folders), all under one
# folder. Node i is lh-n<i> at the loopback address 127.0.0.<i>, so that
# two nodes on one machine still have addresses of their own.
# Sourced, not run: it defines
#   slurm_cluster_start DIR NODES CPUS   writes DIR/slurm.conf, starts the
#                                  daemons, exports SLURM_CONF, waits until
#                                  every node is idle (return 1 if not)
#   slurm_cluster_free_ports OFF...  prints P with every P+OFF free
#   slurm_cluster_stop             cancels the cluster's jobs, waits for
#                                  them, stops the daemons it started (by
#                                  their pids) and waits for them to exit
# No cgroups: proctrack/linuxproc, task/none, no accounting.

SLURM_CLUSTER_PIDS=()

# Prints a port P such that P plus each offset given is free now, chosen
# below the kernel's ephemeral range (tests/free_ports.py, the tests' one
# rule for ports, says why).
slurm_cluster_free_ports() {
  /usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/../tests/free_ports.py" --offsets "$@"
}

# Polls cmd (a string run by bash) every 0.2 s for up to $1 seconds.
slurm_cluster_poll() {
  local seconds=$1; shift
  local end=$((SECONDS + seconds))
  while [ $SECONDS -lt $end ]; do
    if eval "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

slurm_cluster_start() {
  local dir=$1 nodes=$2 cpus=$3
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  local sock="$dir/munge/munge.socket"
  munged --force --key-file="$dir/munge/munge.key" --socket="$sock" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" || return 1
  slurm_cluster_poll 10 "test -s '$dir/munge/munged.pid'" || return 1
  SLURM_CLUSTER_PIDS+=("$(cat "$dir/munge/munged.pid")")

  local host ctld_port mem user i names=""
  host=$(hostname -s)
  # The controller at P, node i at P+i: distinct by construction.
  ctld_port=$(slurm_cluster_free_ports $(seq 0 "$nodes"))
  [ -n "$ctld_port" ] || return 1
  mem=$(awk -v n="$nodes" '/MemTotal/ {print int($2 / 1024 / 2 / n)}' /proc/meminfo)
  user=$(id -un)
  cat > "$dir/slurm.conf" <<EOF
ClusterName=lhtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
KillWait=5
EOF
  # Per node: its spool and its TmpFS (where srun --mpi=pmix puts each
  # step's folder, which would collide between two nodes on one machine).
  for ((i = 1; i <= nodes; i++)); do
    mkdir -p "$dir/spool/lh-n$i" "$dir/tmp/lh-n$i"
    echo "NodeName=lh-n$i NodeHostname=lh-n$i NodeAddr=127.0.0.$i Port=$((ctld_port + i))" \
      "CPUs=$cpus RealMemory=$mem State=UNKNOWN" >> "$dir/slurm.conf"
    names="$names${names:+,}lh-n$i"
  done
  echo "PartitionName=debug Nodes=$names Default=YES MaxTime=INFINITE State=UP" >> "$dir/slurm.conf"
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -D -i -f "$SLURM_CONF" > "$dir/log/slurmctld.out" 2>&1 &
  SLURM_CLUSTER_PIDS+=($!)
  for ((i = 1; i <= nodes; i++)); do
    slurmd -D -N "lh-n$i" -f "$SLURM_CONF" > "$dir/log/slurmd-lh-n$i.out" 2>&1 &
    SLURM_CLUSTER_PIDS+=($!)
  done
  slurm_cluster_poll 60 '[ "$(sinfo -h -o %T | sort -u)" = idle ]'
}

slurm_cluster_stop() {
  if [ -n "${SLURM_CONF:-}" ] && [ ${#SLURM_CLUSTER_PIDS[@]} -gt 1 ]; then
    scancel --full --user="$(id -un)" 2>/dev/null
    slurm_cluster_poll 30 '[ -z "$(squeue -h -o %i 2>/dev/null)" ]'
  fi
  local i pid
  for ((i = ${#SLURM_CLUSTER_PIDS[@]} - 1; i >= 0; i--)); do
    pid=${SLURM_CLUSTER_PIDS[$i]}
    kill "$pid" 2>/dev/null
    slurm_cluster_poll 20 "! kill -0 $pid" || kill -9 "$pid" 2>/dev/null
  done
  SLURM_CLUSTER_PIDS=()
}
