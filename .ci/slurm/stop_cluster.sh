#!/usr/bin/env bash
# Stop the local CI cluster started by start_cluster.sh.
for daemon in slurmd slurmctld slurmdbd; do pkill -x "$daemon" || true; done
mysqladmin shutdown 2>/dev/null || true
pkill -x munged || true
