#!/usr/bin/env bash
# scripts/slurm-shards.sh against a real Slurm: Debian's slurm-wlm (slurmctld and slurmd
# on this machine, munge for authentication), installed if missing and configured in a
# temporary folder; a 4-task array of a small search, its dependent merge, and the merged
# files compared byte for byte with one process's. Needs root (to install packages and
# start the daemons); otherwise it says SKIP and why, and succeeds.
#
#   scripts/test-slurm.sh            # uses target/debug/flashoverlap, built if missing
#   FLASHOVERLAP_BIN=target/release/flashoverlap scripts/test-slurm.sh
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
  echo "SKIP test-slurm: $*"
  exit 0
}

if [[ "$(id -u)" != 0 ]]; then
  skip "needs root to install and start slurmctld, slurmd and munged"
fi
if ! command -v slurmctld > /dev/null || ! command -v munged > /dev/null; then
  command -v apt-get > /dev/null || skip "slurm-wlm is not installed and there is no apt-get"
  echo "test-slurm: installing slurm-wlm and munge (Debian packages)"
  if ! (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    slurm-wlm munge > /dev/null); then
    skip "apt-get could not install slurm-wlm and munge (no package registry?)"
  fi
fi

bin="${FLASHOVERLAP_BIN:-target/debug/flashoverlap}"
if [[ ! -x "$bin" ]]; then
  cargo build --quiet
  bin=target/debug/flashoverlap
fi
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

tmp="$(mktemp -d /tmp/flashoverlap-slurm.XXXXXX)"
chmod 755 "$tmp"
host="$(hostname -s)"
cpus="$(nproc)"
mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2))
mkdir -p "$tmp/state" "$tmp/spool"
conf="$tmp/slurm.conf"
cat > "$conf" << EOF
ClusterName=flashoverlap-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=26817
SlurmdPort=26818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$conf"

cleanup() {
  scancel --quiet --partition test 2> /dev/null || true
  for d in slurmd slurmctld; do
    if [[ -f "$tmp/$d.pid" ]]; then
      kill "$(cat "$tmp/$d.pid")" 2> /dev/null || true
    fi
  done
  sleep 1
  [[ -n "${KEEP:-}" ]] || rm -rf "$tmp"
}
trap cleanup EXIT

# munge: the package's key, its daemon as the munge user (started once per machine).
if ! pgrep -x munged > /dev/null; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  runuser -u munge -- /usr/sbin/munged
fi
# A machine that cannot run the daemons (no munge, a sandbox without the ports) is an
# environment this test cannot use: it says SKIP with the daemons' logs. Once the node
# is up, every failure is the script's and fails the test.
logs() { tail -20 "$tmp/slurmctld.log" "$tmp/slurmd.log" >&2 2> /dev/null || true; }
slurmctld -f "$conf" -i || { logs; skip "slurmctld did not start"; }
slurmd -f "$conf" || { logs; skip "slurmd did not start"; }
state=""
for _ in $(seq 60); do
  state="$(sinfo -h -o %T 2> /dev/null || true)"
  [[ "$state" == idle ]] && break
  sleep 0.5
done
if [[ "$state" != idle ]]; then
  logs
  skip "the one-node Slurm cluster did not come up in 30 s (state \`$state\`)"
fi

search=(search --model llama-3-8b --hardware h100-sxm-8 --seq 1024 --global-batch 16
  --tp 2,4 --pp 1,2 --strategy sequential,flash)
start=$(date +%s)
"$bin" "${search[@]}" --quiet --out "$tmp/one" > /dev/null
FLASHOVERLAP_BIN="$bin" scripts/slurm-shards.sh -n 4 -o "$tmp/array" -w -- "${search[@]}"
for f in search.json search.csv summary.txt; do
  if ! cmp "$tmp/one/$f" "$tmp/array/merged/$f"; then
    echo "test-slurm: FAIL: $f of the merged array differs from one process's" >&2
    exit 1
  fi
done
# A failed task stops the merge: the dependency is never satisfied.
set +e
FLASHOVERLAP_BIN="$bin" scripts/slurm-shards.sh -n 2 -o "$tmp/bad" -w -- \
  search --global-batch 16 --tp 3 > "$tmp/bad.out" 2>&1
status=$?
set -e
if [[ $status == 0 || -e "$tmp/bad/merged/search.json" ]]; then
  echo "test-slurm: FAIL: the merge ran after failed shards" >&2
  exit 1
fi
echo "test-slurm: ok: 4-task array merged equals one process ($(($(date +%s) - start)) s)"
