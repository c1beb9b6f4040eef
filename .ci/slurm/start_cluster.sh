#!/usr/bin/env bash
# Start a real one-node Slurm cluster on this machine (cluster "chorus", partitions
# "debug" (default) and "gpu", account "chorus"), with job accounting through slurmdbd and
# MariaDB, for the tests that run Snakemake through profiles/slurm-ci.
#
# Needs root (Debian's slurm-wlm, SlurmUser=root); no systemd: every daemon is started
# directly. Idempotent: installs the Debian packages once, rewrites the configuration,
# (re)starts only what is not running or whose configuration changed, and smoke-tests the
# cluster (srun, sbatch + sacct) whenever something was started.
#   bash .ci/slurm/start_cluster.sh            # start / check
#   SLURM_SMOKE=1 bash .ci/slurm/start_cluster.sh   # also smoke-test an already running cluster
# Stop with .ci/slurm/stop_cluster.sh (add --purge to forget all state).
set -euo pipefail

T0=$SECONDS
LOGDIR=/var/log/slurm
DB_PASS=chorus-ci
CHANGED=0   # set to 1 when a daemon was (re)started: the smoke test then runs

log() { echo "[slurm-setup +$((SECONDS - T0))s] $*"; }

diagnostics() {
  echo "---------------- diagnostics ----------------" >&2
  for f in /var/log/munge/munged.log /var/log/mysql/error.log $LOGDIR/slurmdbd.log \
           $LOGDIR/slurmctld.log $LOGDIR/slurmd.log; do
    [ -f "$f" ] && { echo "--- tail $f" >&2; tail -n 25 "$f" >&2; }
  done
  echo "--- daemons" >&2
  ps -eo pid,user,args | grep -E '[m]unged|[m]ariadbd|[m]ysqld|[s]lurmdbd|[s]lurmctld|[s]lurmd' >&2 || true
  if command -v sinfo >/dev/null; then
    echo "--- sinfo -R / squeue" >&2
    timeout 10 sinfo -R >&2 || true
    timeout 10 squeue >&2 || true
  fi
}
die() {
  echo "[slurm-setup] ERROR: $*" >&2
  diagnostics
  exit 1
}
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  die "timed out after ${limit}s waiting for $what"
}
# running PIDFILE NAME: the daemon whose pid is in PIDFILE is alive and is NAME
running() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}
# stop_daemon PIDFILE NAME: TERM, then wait (KILL after 20 s)
stop_daemon() {
  local pid
  running "$1" "$2" || return 0
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 40); do running "$1" "$2" || return 0; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null || true
}
# install_if_changed NEW DEST MODE: 0 = DEST was rewritten, 1 = unchanged
install_if_changed() {
  if [ -f "$2" ] && cmp -s "$1" "$2"; then rm -f "$1"; return 1; fi
  install -m "$3" "$1" "$2"
  rm -f "$1"
  return 0
}

[ "$(id -u)" = 0 ] || die "must run as root (Debian's slurm-wlm with SlurmUser=root)"

# -- packages ------------------------------------------------------------------------------
need_install=0
for cmd in slurmctld slurmd slurmdbd sacctmgr sacct srun munged mariadbd mysqld_safe; do
  command -v "$cmd" >/dev/null || need_install=1
done
[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/accounting_storage_mysql.so ] \
  || ls /usr/lib/*/slurm-wlm/accounting_storage_mysql.so >/dev/null 2>&1 || need_install=1
if [ "$need_install" = 1 ]; then
  log "installing slurm-wlm, slurmdbd, munge, mariadb-server (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  # keep package scripts from starting daemons (no init system here; we start them below)
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt_log=$(mktemp /tmp/slurm-apt.XXXXXX.log)
  apt-get update -qq >"$apt_log" 2>&1 || log "apt-get update failed: trying the package lists at hand"
  if ! apt-get install -y -qq -o Dpkg::Options::=--force-confold \
         slurm-wlm slurm-client slurmdbd slurm-wlm-mysql-plugin munge mariadb-server \
         mariadb-client >>"$apt_log" 2>&1; then
    [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
    tail -n 40 "$apt_log" >&2
    die "apt-get install failed (full log: $apt_log)"
  fi
  [ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  log "packages installed: $(dpkg-query -W -f='${Version}' slurmctld) slurm, $(dpkg-query -W -f='${Version}' mariadb-server) mariadb"
fi

# -- host name: slurmd finds its node by the short host name, which must resolve ------------
host=$(hostname -s)
for name in "$host" "$(hostname)"; do
  getent hosts "$name" >/dev/null || { echo "127.0.0.1 $name" >>/etc/hosts; log "added $name to /etc/hosts"; }
done

mkdir -p /etc/slurm $LOGDIR /var/spool/slurmctld /var/spool/slurmd /run/munge /run/mysqld \
  /var/log/munge /var/lib/munge /etc/munge

# -- munge -----------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  log "creating /etc/munge/munge.key"
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
chmod 0700 /etc/munge /var/log/munge
chmod 0400 /etc/munge/munge.key
chmod 0755 /run/munge
if ! running /run/munge/munged.pid munged; then
  log "starting munged"
  rm -f /run/munge/munge.socket.2*
  runuser -u munge -- /usr/sbin/munged --force || die "munged did not start"
  CHANGED=1
fi
wait_for 20 "munge to encode and decode a credential" bash -c 'munge -n | unmunge'

# -- MariaDB and the accounting database ------------------------------------------------------
if [ -d /etc/mysql/mariadb.conf.d ]; then
  # slurmdbd warns below these values (https://slurm.schedmd.com/accounting.html)
  cat >/etc/mysql/mariadb.conf.d/90-slurmdbd.cnf <<'CONF'
[mysqld]
bind-address = 127.0.0.1
innodb_buffer_pool_size = 1024M
innodb_lock_wait_timeout = 900
CONF
fi
if ! mysqladmin ping >/dev/null 2>&1; then
  log "starting mariadb"
  mkdir -p /var/log/mysql   # mariadbd (user mysql) writes its log itself
  chown mysql:mysql /run/mysqld /var/log/mysql
  if [ ! -d /var/lib/mysql/mysql ]; then
    mariadb-install-db --user=mysql --datadir=/var/lib/mysql >"$LOGDIR/mariadb-install.log" 2>&1 \
      || die "mariadb-install-db failed: $(tail -n 5 "$LOGDIR/mariadb-install.log")"
  fi
  (setsid mysqld_safe --skip-syslog --log-error=/var/log/mysql/error.log </dev/null >/dev/null 2>&1 &)
  CHANGED=1
fi
wait_for 60 "mariadb to answer (mysqladmin ping)" mysqladmin ping
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;" \
  || die "could not create slurm_acct_db and its user in mariadb"

# -- slurm.conf (before slurmdbd: sacctmgr reads it too): this node's CPUs and memory, from slurmd -C
node_hw=$(slurmd -C | head -n 1 | tr ' ' '\n' \
  | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')
case "$node_hw" in *CPUs=*RealMemory=*) ;; *) die "could not read the node's hardware from 'slurmd -C'";; esac
tmp=$(mktemp)
cat >"$tmp" <<CONF
# written by .ci/slurm/start_cluster.sh: a one-node cluster on $host
ClusterName=chorus
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# accounting through slurmdbd: sacct answers for finished jobs (the Snakemake plugin
# reads job states from sacct) and keeps the job comment (the plugin writes rule_<name>...)
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageEnforce=associations
AccountingStoreFlags=job_comment
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=300
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=60
SlurmdTimeout=60
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=$host ${node_hw}State=UNKNOWN
# "gpu" shares the node and has no GPUs: it lets the CI profile route the GPU rules to a
# partition of their own, as on a real cluster, while they run on the CPU
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host Default=NO MaxTime=INFINITE State=UP
CONF
restart_slurm=0
if install_if_changed "$tmp" /etc/slurm/slurm.conf 0644; then
  log "wrote /etc/slurm/slurm.conf (NodeName=$host ${node_hw})"
  restart_slurm=1
fi

# -- slurmdbd --------------------------------------------------------------------------------
tmp=$(mktemp)
cat >"$tmp" <<CONF
# written by .ci/slurm/start_cluster.sh
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StoragePort=3306
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
LogFile=$LOGDIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
if install_if_changed "$tmp" /etc/slurm/slurmdbd.conf 0600 && running /run/slurmdbd.pid slurmdbd; then
  log "slurmdbd.conf changed: restarting slurmdbd"
  stop_daemon /run/slurmdbd.pid slurmdbd
fi
if ! running /run/slurmdbd.pid slurmdbd; then
  log "starting slurmdbd"
  slurmdbd || die "slurmdbd did not start"
  CHANGED=1
fi
wait_for 60 "slurmdbd to answer sacctmgr" sacctmgr -n list cluster

# -- cluster, account and user in the accounting database ----------------------------------------
sacctmgr -n list cluster format=cluster | grep -qw chorus \
  || sacctmgr -i add cluster chorus >/dev/null || die "sacctmgr add cluster chorus failed"
sacctmgr -n list account format=account | grep -qw chorus \
  || sacctmgr -i add account chorus Cluster=chorus Description="chorus-flow CI" Organization=chorus >/dev/null \
  || die "sacctmgr add account chorus failed"
sacctmgr -n list associations cluster=chorus user=root format=account | grep -qw chorus \
  || sacctmgr -i add user root Account=chorus DefaultAccount=chorus Cluster=chorus >/dev/null \
  || die "sacctmgr add user root failed"
sacctmgr -n list associations cluster=chorus user=root format=account | grep -qw chorus \
  || die "sacctmgr did not record the root@chorus association"

# -- slurmctld and slurmd ------------------------------------------------------------------------
if [ "$restart_slurm" = 1 ] && { running /run/slurmctld.pid slurmctld || running /run/slurmd.pid slurmd; }; then
  # node definitions change only with a restart; running jobs survive it (state is saved)
  log "slurm.conf changed: restarting slurmctld and slurmd"
  stop_daemon /run/slurmd.pid slurmd
  stop_daemon /run/slurmctld.pid slurmctld
fi
if ! running /run/slurmctld.pid slurmctld; then
  log "starting slurmctld"
  slurmctld || die "slurmctld did not start"
  CHANGED=1
fi
wait_for 60 "slurmctld to answer (scontrol ping)" bash -c 'scontrol ping | grep -q UP'
if ! running /run/slurmd.pid slurmd; then
  log "starting slurmd"
  slurmd || die "slurmd did not start"
  CHANGED=1
fi
node_state() { sinfo -h -n "$host" -o '%T' 2>/dev/null | head -n 1; }
ready() { node_state | grep -qE '^(idle|mixed|allocated|completing)$'; }
deadline=$((SECONDS + 60))
until ready; do
  case "$(node_state)" in
    *drain*|down*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
  esac
  [ "$SECONDS" -lt "$deadline" ] || die "node $host is not up: state '$(node_state)'"
  sleep 0.5
done

# -- smoke test: srun, and an sbatch job that sacct reports COMPLETED with its comment ----------------
if [ "$CHANGED" = 1 ] || [ "${SLURM_SMOKE:-0}" = 1 ]; then
  if [ "$(node_state)" != idle ]; then
    log "node busy ($(node_state)): smoke test skipped"
  else
    out=$(timeout 60 srun -A chorus -p debug -N1 -n1 -t 1 hostname 2>&1) || die "srun hostname failed: $out"
    [ "$out" = "$host" ] || die "srun hostname answered '$out', expected '$host'"
    jobid=$(sbatch --parsable -A chorus -p debug -t 1 --mem 100 --comment chorus_smoke \
              -o /dev/null --wrap 'true') || die "sbatch --wrap failed"
    deadline=$((SECONDS + 60))
    until [ "$(sacct -n -X -P -j "$jobid" -o State,Comment 2>/dev/null | head -n 1)" = "COMPLETED|chorus_smoke" ]; do
      [ "$SECONDS" -lt "$deadline" ] || die "sacct does not report job $jobid COMPLETED with comment chorus_smoke: '$(sacct -n -X -P -j "$jobid" -o State,Comment 2>&1)'"
      sleep 0.5
    done
    log "smoke test passed: srun answered $out, sbatch job $jobid COMPLETED in sacct"
  fi
fi
log "cluster up in $((SECONDS - T0))s: $(sinfo -h -o '%P %D %T %c CPUs %m MB' | tr '\n' ';')"
