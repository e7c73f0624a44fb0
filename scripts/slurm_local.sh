#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, with accounting, to try `hydra/launcher=slurm` without a cluster.
#
#   sudo scripts/slurm_local.sh start    # install (Debian/Ubuntu) if needed, start munged, MariaDB, slurmdbd,
#                                        # slurmctld, slurmd; prints the SLURM_CONF line to export
#   sudo scripts/slurm_local.sh status   # what runs, and whether it was started here
#   sudo scripts/slurm_local.sh stop     # wait for the queue to empty, stop what `start` started
#
# Everything lives in $NORMBENCH_SLURM_DIR (default /tmp/normbench-slurm): configs, logs, pid files, a
# private MariaDB data directory (kept across stop/start, so a second start skips its initialization).
# Nothing under /etc is written: clients find the cluster through SLURM_CONF. `start` and `stop` are
# idempotent; `stop` stops only the daemons whose pid `start` recorded in $STATE/started/ (a munged that
# was already running is used and left running). See docs/cluster.md.
set -euo pipefail

STATE=${NORMBENCH_SLURM_DIR:-/tmp/normbench-slurm}
DB_PORT=${NORMBENCH_SLURM_DB_PORT:-6829}   # the private MariaDB, on loopback only
CONF=$STATE/etc/slurm.conf
PACKAGES="slurm-wlm slurmdbd munge mariadb-server"
export SLURM_CONF=$CONF

say() { echo "slurm_local: $*" >&2; }
die() { say "error: $*"; exit 1; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
# The pid of a daemon this script started and that still runs, if any (checked by name, so a pid the
# system has since given to another process is never taken for it, nor killed).
ours() {
  local name=$1 pid comm
  pid=$(cat "$STATE/started/$name" 2>/dev/null) || return 0
  comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 0
  [ "$comm" = "$name" ] || [ "$name.$comm" = mariadb.mariadbd ] && echo "$pid"
  return 0
}

# Wait up to $2 seconds for the command $1 to succeed.
wait_for() {
  local cmd=$1 limit=$2 i
  for ((i = 0; i < limit * 5; i++)); do
    if eval "$cmd" >/dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}

install_packages() {
  local missing=0 b
  for b in slurmctld slurmd slurmdbd munged mariadbd sacct; do
    command -v "$b" >/dev/null || [ -x "/usr/sbin/$b" ] || missing=1
  done
  [ "$missing" = 0 ] && return
  command -v apt-get >/dev/null || die "slurm is not installed and this is not Debian/Ubuntu; install $PACKAGES"
  say "installing $PACKAGES"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $PACKAGES >/dev/null
}

write_configs() {
  local host node mem_avail_mb real_mb
  host=$(hostname -s)
  mkdir -p "$STATE/etc" "$STATE/log" "$STATE/run" "$STATE/ctld" "$STATE/spool" "$STATE/started"
  # slurmd -C prints this machine's line (CPUs, sockets, cores, threads); RealMemory is set below free memory
  # so that slurmd does not drain the node for having less than configured.
  node=$(/usr/sbin/slurmd -C | head -1 | sed 's/ RealMemory=[0-9]*//')
  mem_avail_mb=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
  real_mb=$((mem_avail_mb > 3072 ? mem_avail_mb - 2048 : 1024))
  cat >"$CONF" <<EOF
# Written by scripts/slurm_local.sh: a one-node cluster on loopback.
ClusterName=normbench
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
# No cgroups needed: works on cgroup v1 or v2, with or without systemd.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
# A job that names no memory gets this much per CPU, not the whole node.
DefMemPerCPU=1024
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
# scancel/timeouts: SIGTERM, then SIGKILL after this many seconds (a cluster's default is 30).
KillWait=5
# Accounting, so that sacct reports a killed task's state (submitit polls it).
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
$node RealMemory=$real_mb State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
  cat >"$STATE/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=normbench
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$STATE/etc/slurmdbd.conf"   # slurmdbd refuses a readable one (it holds the password)
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return; fi   # already running (ours or the system's)
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
  [ -f /etc/munge/munge.key ] || die "/etc/munge/munge.key is missing (reinstall munge, or run mungekey)"
  start-stop-daemon --start --quiet --chuid munge --exec /usr/sbin/munged
  wait_for "munge -n | unmunge" 10 || die "munged did not start (see /var/log/munge/munged.log)"
  cat /run/munge/munged.pid >"$STATE/started/munged"
}

start_mariadb() {
  local dir=$STATE/mariadb sql   # owned by mysql: its data, socket, pid and log
  sql="mariadb --no-defaults --socket=$dir/mysqld.sock -uroot"
  alive "$(ours mariadb)" && return
  mkdir -p "$dir" && chown mysql:mysql "$dir"
  if [ ! -d "$dir/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$dir/data" --user=mysql --auth-root-authentication-method=socket \
      --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1 || die "mariadb-install-db failed: $STATE/log/mariadb-install.log"
  fi
  setsid mariadbd --no-defaults --datadir="$dir/data" --socket="$dir/mysqld.sock" --port="$DB_PORT" \
    --bind-address=127.0.0.1 --pid-file="$dir/mariadb.pid" --user=mysql --skip-log-bin \
    --innodb-buffer-pool-size=64M --log-error="$dir/mariadb.log" </dev/null >/dev/null 2>&1 &
  echo $! >"$STATE/started/mariadb"
  wait_for "$sql -e 'select 1'" 30 || die "MariaDB did not start (see $dir/mariadb.log)"
  $sql -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'normbench';
           CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'normbench';
           GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
           GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
}

# start_slurm_daemon NAME: start slurmdbd, slurmctld or slurmd unless this script's copy already runs.
start_slurm_daemon() {
  local name=$1 pid
  alive "$(ours "$name")" && return
  if pgrep -x "$name" >/dev/null; then
    die "a $name not started by this script is running (pid $(pgrep -x "$name" | head -1)); stop it first"
  fi
  /usr/sbin/"$name"   # daemonizes; its pid file is in $STATE/run
  wait_for "[ -s $STATE/run/$name.pid ] && kill -0 \$(cat $STATE/run/$name.pid)" 15 ||
    die "$name did not start (see $STATE/log/$name.log)"
  pid=$(cat "$STATE/run/$name.pid")
  echo "$pid" >"$STATE/started/$name"
}

cmd_start() {
  local t0=$SECONDS
  [ "$(id -u)" = 0 ] || die "run as root (sudo): the daemons switch users and write under /run"
  install_packages
  # Rewrite the configs only when no daemon of ours reads them (a second `start` changes nothing).
  alive "$(ours slurmctld)" || alive "$(ours slurmd)" || alive "$(ours slurmdbd)" || write_configs
  start_munge
  start_mariadb
  start_slurm_daemon slurmdbd
  wait_for "sacctmgr -n list cluster" 30 || die "slurmdbd does not answer (see $STATE/log/slurmdbd.log)"
  start_slurm_daemon slurmctld
  start_slurm_daemon slurmd
  wait_for "sinfo -h -N -o %T | grep -qE '^(idle|mixed|allocated)'" 30 ||
    die "the node did not come up: $(sinfo -h -N -o '%T %E' 2>&1) (see $STATE/log/slurmd.log)"
  # slurmctld registers the cluster with slurmdbd once it connects; sacct fails until then.
  wait_for "sacct -n -X -S now" 30 || die "sacct does not work (see $STATE/log/slurmctld.log)"
  say "up in $((SECONDS - t0)) s: $(sinfo -h -o '%P %D node(s) %c CPUs %m MB %T')"
  echo "export SLURM_CONF=$CONF"
}

# stop_daemon NAME: SIGTERM the pid `start` recorded, wait for it to exit (SIGKILL after 20 s).
stop_daemon() {
  local name=$1 pid i
  pid=$(ours "$name")
  if alive "$pid"; then
    kill "$pid"
    for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.2; done
    alive "$pid" && { say "$name (pid $pid) ignored SIGTERM; killing it"; kill -9 "$pid"; }
  fi
  rm -f "$STATE/started/$name"
}

cmd_stop() {
  local i
  if alive "$(ours slurmctld)"; then
    # The sweep can return while job steps are still finishing: let them end, cancel what stays.
    for ((i = 0; i < 60; i++)); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
    if [ -n "$(squeue -h 2>/dev/null)" ]; then
      say "jobs still queued after 60 s; cancelling them"
      scancel --full --signal=KILL -u "$(id -un)" 2>/dev/null || true
      for ((i = 0; i < 30; i++)); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 1; done
    fi
  fi
  # Reverse order of start; munged last, since job steps still talk to it while they end.
  for name in slurmd slurmctld slurmdbd mariadb munged; do stop_daemon "$name"; done
  say "stopped"
}

cmd_status() {
  local name pid state=0
  for name in munged mariadb slurmdbd slurmctld slurmd; do
    pid=$(ours "$name")
    if alive "$pid"; then echo "$name: running (pid $pid, started by this script)"
    elif [ "$name" = munged ] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then echo "munged: running (not ours)"
    else echo "$name: not running"; state=3
    fi
  done
  [ "$state" = 0 ] && sinfo && echo "export SLURM_CONF=$CONF"
  return $state
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) echo "usage: $0 start|stop|status   (state in $STATE)" >&2; exit 2 ;;
esac
