#!/usr/bin/env bash
# Start a real one-node Slurm cluster on localhost, with accounting (slurmdbd + MariaDB),
# for the tests that run the workflow through profiles/slurm-ci. Needs root; idempotent:
# installs Debian's packages once, then (re)starts only what is not running.
set -euo pipefail

log() { echo "[slurm-setup] $*"; }
die() {
  echo "[slurm-setup] ERROR: $*" >&2
  for f in /var/log/slurm/slurmdbd.log /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}
wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2
  shift 2
  for _ in $(seq "$limit"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "timed out waiting for $what"
}

[ "$(id -u)" = 0 ] || die "must run as root (Debian's slurm-wlm with SlurmUser=root)"

if ! command -v slurmctld >/dev/null || ! command -v slurmdbd >/dev/null || ! command -v mariadbd >/dev/null; then
  log "installing slurm-wlm, slurmdbd, munge, mariadb-server"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm slurmdbd munge mariadb-server >/dev/null
fi

host=$(hostname)
getent hosts "$host" >/dev/null || echo "127.0.0.1 $host" >>/etc/hosts
mkdir -p /etc/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd /run/munge

# -- munge --------------------------------------------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
chmod 0400 /etc/munge/munge.key
if ! pgrep -x munged >/dev/null; then
  log "starting munged"
  runuser -u munge -- /usr/sbin/munged --force
fi
wait_for 20 munge bash -c 'munge -n | unmunge'

# -- MariaDB and the accounting database ----------------------------------------------------
if ! pgrep -x mariadbd >/dev/null && ! pgrep -x mysqld >/dev/null; then
  log "starting mariadb"
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
  (mysqld_safe --skip-networking=0 --bind-address=127.0.0.1 >/var/log/slurm/mariadb.log 2>&1 &)
fi
wait_for 60 mariadb mysqladmin ping
mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'chorus-ci';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"

# -- slurmdbd -------------------------------------------------------------------------------
cat >/etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=chorus-ci
StorageLoc=slurm_acct_db
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
CONF
chmod 0600 /etc/slurm/slurmdbd.conf
if ! pgrep -x slurmdbd >/dev/null; then
  log "starting slurmdbd"
  slurmdbd
fi
wait_for 60 "slurmdbd on port 6819" bash -c 'exec 3<>/dev/tcp/127.0.0.1/6819'

# -- slurm.conf for this node ----------------------------------------------------------------
cpus=$(nproc)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
cat >/etc/slurm/slurm.conf <<CONF
ClusterName=chorus
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=300
KillWait=5
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

# -- accounts, then the controller and the node daemon ----------------------------------------
sacctmgr -i add cluster chorus >/dev/null 2>&1 || true
sacctmgr -i add account chorus Description="chorus-flow CI" Organization=chorus >/dev/null 2>&1 || true
sacctmgr -i add user root Account=chorus DefaultAccount=chorus >/dev/null 2>&1 || true
sacctmgr -n list associations cluster=chorus user=root format=account | grep -q chorus \
  || die "sacctmgr did not record the root@chorus association"

if ! pgrep -x slurmctld >/dev/null; then
  log "starting slurmctld"
  slurmctld
fi
wait_for 60 slurmctld scontrol ping
if ! pgrep -x slurmd >/dev/null; then
  log "starting slurmd"
  slurmd
fi
scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
wait_for 60 "node $host idle" bash -c "sinfo -h -N -o '%t' | grep -qE '^(idle|mix|alloc)'"

# -- smoke test: a job runs and accounting sees it ---------------------------------------------
out=$(timeout 60 srun -A chorus -p debug -N1 -n1 hostname) || die "srun failed"
[ "$out" = "$host" ] || die "srun answered '$out', expected '$host'"
log "cluster up: $(sinfo -h -o '%P %D %t %c CPUs %m MB')"
