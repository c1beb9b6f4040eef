#!/usr/bin/env bash
# Stop the local CI cluster started by start_cluster.sh: the daemons whose pid files it
# wrote, in reverse order. With --purge also forget every job, the accounting database and
# the generated configuration (the next start_cluster.sh then starts from scratch, short
# of the package install).
set -uo pipefail
purge=0
[ "${1:-}" = "--purge" ] && purge=1

alive() { # alive PIDFILE NAME
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$2" ]
}
stop() { # stop PIDFILE NAME
  local pid
  alive "$1" "$2" || return 0
  pid=$(cat "$1")
  echo "[slurm-stop] stopping $2 ($pid)"
  kill "$pid" 2>/dev/null
  for _ in $(seq 40); do alive "$1" "$2" || return 0; sleep 0.5; done
  echo "[slurm-stop] $2 ($pid) ignored TERM for 20s: KILL"
  kill -9 "$pid" 2>/dev/null
}

if [ "$purge" = 1 ] && command -v scancel >/dev/null && timeout 10 scontrol ping 2>/dev/null | grep -q UP; then
  timeout 20 scancel --full --quiet --user=root 2>/dev/null || true
fi
stop /run/slurmd.pid slurmd
stop /run/slurmctld.pid slurmctld
stop /run/slurmdbd.pid slurmdbd
if command -v mysqladmin >/dev/null && mysqladmin ping >/dev/null 2>&1; then
  if [ "$purge" = 1 ]; then
    mysql -e "DROP DATABASE IF EXISTS slurm_acct_db; DROP USER IF EXISTS 'slurm'@'localhost';"
  fi
  echo "[slurm-stop] stopping mariadb"
  mysqladmin shutdown
fi
stop /run/munge/munged.pid munged
if [ "$purge" = 1 ]; then
  echo "[slurm-stop] purging Slurm state and configuration"
  rm -rf /var/spool/slurmctld/* /var/spool/slurmd/*
  rm -f /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf
fi
exit 0
