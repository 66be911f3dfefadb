#!/usr/bin/env bash
# Regenerate the Slurm JSON captures in this folder from real Slurm daemons. Each
# capture folder gets scenario.txt (role=JOBID, one line per submitted job, saying
# what it is), version.txt (sinfo -V) and the JSON the parsers must read.
#
# local: the default topology (v100:2x4,p100:2x4,k80:2x4) of tools/local-cluster,
# any release (22.05 on the host, 24.11/26.05 in its chroot): multi-node jobs placed
# the daemon's way, checkpoint (exit 99), drained and down nodes.
#   tools/local-cluster up --slurm 22.05 --dir /tmp/capture --port-base auto
#   eval "$(tools/local-cluster env --dir /tmp/capture)"   # SLURM_CONF (and PATH)
#   tests/backends/data/capture.sh local [OUTDIR]
#   tools/local-cluster down --dir /tmp/capture
# OUTDIR defaults to 22.05/ (22.05) or <release>/local-cluster/. 22.05 writes the
# plain --json (squeue.json, sinfo.json), later releases the newest data_parser's
# squeue -t all, scontrol --json show nodes and sinfo.
#
# chroot: a one-node Slurm already running inside a Debian root file system ROOT
# (trixie = 24.11, sid = 26.05; built with mmdebstrap, slurmctld/slurmd on ports
# 7817/7818; the script that started it is not part of this repository), for every
# data_parser the release offers:
#   tests/backends/data/capture.sh chroot ROOT [OUTDIR]   # -> 24.11/
# reservations: admin reservations on a local cluster (any release, as for local):
# one of each kind the daemon reads (active, future and MAGNETIC, FLEX+MAINT, a
# user exclusion), written as scontrol's text (22.05: no --json there), scontrol's
# JSON for every data_parser (24.11+) and slurmrestd's /reservations when the
# cluster runs one (--rest); removed again at the end:
#   tests/backends/data/capture.sh reservations [OUTDIR]   # -> <release>/reservations/
#
# listing: the job listing's text (slurm/cli/listing.py) on a FRESH local cluster
# (job ids from 1; any release): 1 managed and held (`sbatch --hold`: job_submit.lua
# adds hold=user); 2-4 the two tasks of an array whose comment holds '|' and a newline
# with a fake record after it, and a comment of invalid UTF-8 bytes and "\r\n" with a
# year's time limit (which id each gets depends on when Slurm splits the array); printed
# with
# listing_command's fields, the token |0123456789abcdef| and SLURM_TIME_FORMAT=%s
# (PYTHONPATH must name this checkout):
#   tests/backends/data/capture.sh listing [OUTFILE]   # -> <release>/listing.txt
#
# It first reshapes that cluster (same ports): v100-1 with 4 GPUs, a k80 node that
# never answers (drained by the scenario), RequeueExitHold=99, a clean state; jobs
# run as user gavel.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:?usage: capture.sh local [OUTDIR] | capture.sh reservations [OUTDIR] | capture.sh listing [OUTFILE] | capture.sh chroot ROOT [OUTDIR]}"
# every data_parser version a CLI of the supported releases may offer
PARSERS="v0.0.39 v0.0.40 v0.0.41 v0.0.42 v0.0.43 v0.0.44 v0.0.45"
compact() { python3 -c 'import json,sys; json.dump(json.load(sys.stdin), sys.stdout, separators=(",", ":"), sort_keys=True); print()'; }

capture_local() {
  local out="$1" job="$here/../jobs/checkpoint_job.sh" work
  work="$(mktemp -d)"
  cd "$work"
  : "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the local cluster}"
  sub() { sbatch --parsable -o /dev/null "$@"; }
  place() {  # JOBID PARTITION GRES NODES NUMNODES: what the daemon does to start a job
    # In the daemon's order (24.11 refuses NodeList=a,b before NumNodes=2). 24.11
    # answers "Resource temporarily unavailable" to an update in the first moments
    # after submission (seen 10 ms after): retried.
    for _ in $(seq 25); do
      scontrol update JobId="$1" Partition="$2" NumNodes="$5-$5" NodeList="$4" Gres="$3" \
        StartTime=now 2>/dev/null && break
      sleep 0.2
    done
    scontrol show job "$1" | grep -q "Partition=$2 " || { echo "cannot place job $1" >&2; exit 1; }
    scontrol release "$1"
  }
  wait_state() {  # JOBID STATE
    for _ in $(seq 100); do
      [[ "$(squeue -h -t all -j "$1" -o %T 2>/dev/null)" == "$2" ]] && return 0
      sleep 0.2
    done
    echo "job $1 never reached $2" >&2; exit 1
  }
  ok=$(sub -p k80 --gres=gpu:k80:1 --wrap 'true')
  bad=$(sub -p k80 --gres=gpu:k80:1 --wrap 'exit 3')
  wait_state "$ok" COMPLETED; wait_state "$bad" FAILED
  held=$(sub --comment='gavel:type=ResNet-50 (batch size 64)' -p gpu --wrap 'sleep 600')
  run1=$(sub --comment='gavel:type=LM (batch size 5),scale=2' -p gpu "$job" "$work/run1")
  place "$run1" v100 gpu:v100:2 v100-1 1
  multi=$(sub --comment='gavel:type=Transformer (batch size 16),scale=8' -p gpu "$job" "$work/multi")
  place "$multi" p100 gpu:p100:4 p100-1,p100-2 2
  ckpt=$(sub --comment='gavel:type=A3C,scale=1' -p gpu "$job" "$work/ckpt")
  place "$ckpt" v100 gpu:v100:1 v100-2 1
  unmanaged=$(sub -p k80 --gres=gpu:k80:3 --wrap 'sleep 600')
  unmanaged_pending=$(sub -p k80 --gres=gpu:k80:4 -N 2 --wrap 'sleep 600')
  cancelled=$(sub --comment='gavel:type=A3C' -p gpu --wrap 'sleep 600')
  scancel "$cancelled"
  wait_state "$run1" RUNNING; wait_state "$multi" RUNNING; wait_state "$ckpt" RUNNING
  wait_state "$unmanaged" RUNNING
  sleep 1
  scancel --signal=USR1 --batch "$ckpt"      # the preemption: checkpoint, exit 99
  for _ in $(seq 100); do
    [[ "$(squeue -h -j "$ckpt" -o %T)" == SPECIAL_EXIT ]] && break; sleep 0.2
  done
  scontrol update NodeName=p100-2 State=DRAIN Reason=capture-drain
  # A DOWN node may come back on its own before the capture reads it (ReturnToService=2
  # returns it when its slurmd registers: CI, 24.11): captured again until it shows down.
  local try
  for try in 1 2 3 4 5; do
    if ! scontrol show node k80-2 | grep -q "State=DOWN"; then
      scontrol update NodeName=k80-2 State=DOWN Reason=capture-down
    fi
    sleep 1
    sinfo -V > "$out/version.txt"
    local newest
    newest=$(squeue --json=list 2>/dev/null | sed -n 's,^data_parser/,,p' | sort -V | tail -1 || true)
    if [[ -z "$newest" ]]; then  # 22.05: plain --json, squeue lists every job
      squeue --json > "$out/squeue.json"
      sinfo --json > "$out/sinfo.json"
    else
      squeue --json="$newest" -t all | compact > "$out/squeue-t-all.$newest.json"
      # what the CLI transport asks 24.11+ for (cli/json_format.COMPLEX_VALUES_SINCE)
      squeue --json="$newest+complex" -t all | compact > "$out/squeue-t-all.$newest+complex.json"
      scontrol --json="$newest" show nodes | compact > "$out/scontrol-nodes.$newest.json"
      sinfo --json="$newest" | compact > "$out/sinfo.$newest.json"
    fi
    scontrol show job --oneliner > "$out/scontrol-show-job.txt"
    scontrol show node --oneliner > "$out/scontrol-show-node.txt"
    grep -q "^NodeName=k80-2 .*State=DOWN" "$out/scontrol-show-node.txt" && break
    [[ $try -lt 5 ]] || { echo "k80-2 did not stay DOWN long enough to be captured" >&2; exit 1; }
  done
  cat > "$out/scenario.txt" <<EOF
# Slurm $(sinfo -V | sed 's/^[^ ]* //') on tools/local-cluster (job_submit.lua holds gavel: jobs on arrival);
# managed jobs are started the daemon's way (scontrol update + release).
held=$held  # managed, held on arrival, no GRES asked
run1=$run1  # managed, placed on v100-1 with gpu:v100:2, running
multi=$multi  # managed, placed on p100-[1-2] with gpu:p100:4 each, running
ckpt=$ckpt  # managed, ran on v100-2, USR1 -> exit 99 -> SPECIAL_EXIT (held, restarts 1)
unmanaged=$unmanaged  # not managed, --gres=gpu:k80:3, running on k80-1
unmanaged_pending=$unmanaged_pending  # not managed, --gres=gpu:k80:4 -N 2, pending (Resources)
ok=$ok  # not managed, completed
bad=$bad  # not managed, exit 3 -> FAILED
cancelled=$cancelled  # managed, cancelled while held
# nodes: p100-2 drained (with multi on it), k80-2 down
EOF
  # Clean-up only (the capture is written): a DOWN node may already be back on its own
  # (ReturnToService=2 once its slurmd registers; seen on 26.05), and RESUME of an idle
  # node is 'Invalid node state transition'.
  scontrol update NodeName=p100-2 State=RESUME || true
  scontrol update NodeName=k80-2 State=RESUME || true
  squeue -h -o %i | xargs -r scancel
  cd / && rm -rf "$work"
}

capture_chroot() {
  local root="$1" out="$2" cp dp pid
  C() { chroot "$root" "$@"; }
  U() { chroot --userspec=gavel:gavel "$root" env HOME=/tmp "$@"; }
  sub() { U sbatch --parsable --chdir=/tmp -o /dev/null "$@"; }
  cp=$(sed -n 's/^SlurmctldPort=//p' "$root/etc/slurm/slurm.conf")
  dp=$(sed -n 's/^SlurmdPort=//p' "$root/etc/slurm/slurm.conf")
  [[ -n "$cp" && -n "$dp" ]] || { echo "no cluster configured in $root (chroot-cluster.sh start first)" >&2; exit 1; }
  # reshape: cancel every job (a running job's slurmstepd outlives slurmd), stop
  # slurmd and slurmctld (by their pid files), new config, clean state
  local ids
  ids=$(C squeue -h -t all -o %i 2>/dev/null | tr '\n' ' ' || true)
  if [[ -n "${ids// }" ]]; then
    C scancel $ids 2>/dev/null || true
    for _ in $(seq 60); do [[ -z "$(C squeue -h -t running,completing -o %i)" ]] && break; sleep 0.5; done
  fi
  for f in "$root/run/slurmd.pid" "$root/run/slurmctld.pid"; do
    if [[ -s "$f" ]]; then
      pid=$(cat "$f"); kill "$pid" 2>/dev/null || true
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    fi
  done
  rm -rf "$root/var/spool/slurmctld/"* "$root/var/spool/slurmd/"*
  : > "$root/var/lib/fakegpu/nvidia2"; : > "$root/var/lib/fakegpu/nvidia3"
  sed -i -e 's/^NodeName=v100-1 .*/NodeName=v100-1 NodeAddr=127.0.0.1 CPUs=2 RealMemory=2000 Gres=gpu:v100:4 State=UNKNOWN/' \
         -e '/^NodeName=k80-1/d' -e '/^PartitionName=/d' -e '/^RequeueExitHold=/d' "$root/etc/slurm/slurm.conf"
  cat >> "$root/etc/slurm/slurm.conf" <<CONF
RequeueExitHold=99
NodeName=k80-1 NodeAddr=192.0.2.1 CPUs=2 RealMemory=2000 Gres=gpu:k80:2 State=UNKNOWN
PartitionName=gpu Nodes=v100-1,k80-1 Default=YES MaxTime=INFINITE State=UP
PartitionName=v100 Nodes=v100-1 MaxTime=INFINITE State=UP
CONF
  echo "NodeName=v100-1 Name=gpu Type=v100 File=/var/lib/fakegpu/nvidia[0-3]" > "$root/etc/slurm/gres.conf"
  C /usr/sbin/slurmctld -i
  sleep 2
  C /usr/sbin/slurmd -N v100-1
  for _ in $(seq 60); do
    [[ "$(C sinfo -h -n v100-1 -o %t 2>/dev/null)" == idle ]] && break; sleep 0.5
  done
  wait_state() {  # JOBID STATE...
    local s
    for _ in $(seq 150); do
      s=$(C squeue -h -t all -j "$1" -o %T 2>/dev/null || true)
      for want in "${@:2}"; do [[ "$s" == "$want" ]] && return 0; done
      sleep 0.2
    done
    echo "job $1 is ${s:-gone}, never reached ${*:2}" >&2; exit 1
  }
  ok=$(sub --wrap 'true')
  bad=$(sub --wrap 'exit 3')
  ckpt=$(sub --comment='gavel:type=A3C,scale=1' --gres=gpu:v100:1 --wrap 'exit 99')
  wait_state "$ok" COMPLETED; wait_state "$bad" FAILED; wait_state "$ckpt" SPECIAL_EXIT
  rqh=$(sub --comment='gavel:type=A3C,scale=1' --gres=gpu:v100:1 --wrap 'sleep 600')
  wait_state "$rqh" RUNNING
  C scontrol requeuehold "$rqh"
  wait_state "$rqh" PENDING REQUEUE_HOLD
  run1=$(sub --comment='gavel:type=LM (batch size 5),scale=1' --gres=gpu:v100:1 --wrap 'sleep 600')
  multi=$(sub --comment='gavel:type=Transformer (batch size 16),scale=2' --gres=gpu:v100:2 --wrap 'sleep 600')
  wait_state "$run1" RUNNING; wait_state "$multi" RUNNING
  held=$(sub --hold --comment='gavel:type=ResNet-50 (batch size 64)' --gres=gpu:v100:1 --wrap 'sleep 600')
  per_job=$(sub --hold --comment='gavel:type=A3C' --gpus=v100:2 --wrap 'sleep 600')
  unmanaged_pending=$(sub -p v100 --gres=gpu:v100:4 --wrap 'sleep 600')
  cancelled=$(sub --hold --comment='gavel:type=A3C' --gres=gpu:v100:1 --wrap 'sleep 600')
  C scancel "$cancelled"
  wait_state "$cancelled" CANCELLED
  C scontrol update NodeName=k80-1 State=DRAIN Reason=capture-drain
  sleep 2
  C sinfo -V > "$out/version.txt"
  local v
  for v in $PARSERS; do
    # a parser the CLI does not offer prints an error and no JSON: no file
    C sinfo --json="$v" 2>/dev/null | compact > "$out/sinfo.$v.json" 2>/dev/null || rm -f "$out/sinfo.$v.json"
    [[ -s "$out/sinfo.$v.json" ]] || { rm -f "$out/sinfo.$v.json"; continue; }
    C squeue --json="$v" -t all | compact > "$out/squeue-t-all.$v.json"
    C scontrol --json="$v" show nodes | compact > "$out/scontrol-nodes.$v.json"
    C scontrol --json="$v" show jobs | compact > "$out/scontrol-jobs.$v.json"
  done
  C squeue --json | compact > "$out/squeue.json"  # the default: no finished jobs
  C squeue --json=list > "$out/json-list.txt" 2>/dev/null
  # slurmrestd (tests of the REST backend read these through the same parsers)
  local sock="$root/tmp/slurmrestd.sock" newest
  newest=$(C squeue --json=list 2>/dev/null | sed 's,data_parser/,,' | sort -V | tail -1)
  if [[ -S "$sock" ]]; then
    curl -s --unix-socket "$sock" "http://x/slurm/$newest/jobs" | compact > "$out/rest-$newest-jobs.json"
    curl -s --unix-socket "$sock" "http://x/slurm/$newest/nodes" | compact > "$out/rest-$newest-nodes.json"
  fi
  cat > "$out/scenario.txt" <<EOF
# Slurm $release in a Debian chroot (capture.sh chroot): v100-1 (gpu:v100:4) runs
# the jobs, k80-1 (gpu:k80:2) never answers and is drained; jobs submitted by user
# gavel with sbatch --chdir=/tmp -o /dev/null, RequeueExitHold=99.
ok=$ok  # not managed, --wrap true: COMPLETED
bad=$bad  # not managed, exit 3: FAILED
ckpt=$ckpt  # managed, --gres=gpu:v100:1, exit 99: SPECIAL_EXIT (held, restarts 1)
rqh=$rqh  # managed, --gres=gpu:v100:1, ran, then scontrol requeuehold: held, restarts 1
run1=$run1  # managed, --gres=gpu:v100:1: RUNNING on v100-1
multi=$multi  # managed, --gres=gpu:v100:2, scale=2: RUNNING on v100-1
held=$held  # managed, --hold --gres=gpu:v100:1: PENDING, held (priority 0)
per_job=$per_job  # managed, --hold --gpus=v100:2 (tres_per_job): PENDING, held
unmanaged_pending=$unmanaged_pending  # not managed, -p v100 --gres=gpu:v100:4: PENDING (Resources)
cancelled=$cancelled  # managed, --hold, then scancel: CANCELLED
# nodes: v100-1 mixed (3 of 4 GPUs in use), k80-1 drained and not responding
EOF
}

capture_reservations() {
  local out="$1" v sock
  scontrol create reservation ReservationName=maint1 Nodes=v100-1 StartTime=now Duration=60 \
    Users=root Flags=IGNORE_JOBS >/dev/null
  scontrol create reservation ReservationName=future1 Nodes=p100-1 StartTime=now+3600 \
    Duration=60 Accounts=root Flags=MAGNETIC >/dev/null
  scontrol create reservation ReservationName=flex1 Nodes=k80-1 StartTime=now Duration=60 \
    Users=root Flags=FLEX,MAINT,IGNORE_JOBS >/dev/null
  scontrol create reservation ReservationName=notroot Nodes=p100-2 StartTime=now Duration=60 \
    Users=-root Flags=IGNORE_JOBS >/dev/null
  sinfo -V > "$out/version.txt"
  # as the daemon reads it (epoch seconds), and in scontrol's default local time
  SLURM_TIME_FORMAT=%s scontrol show reservation --oneliner > "$out/scontrol-show-res.txt"
  scontrol show reservation --oneliner > "$out/scontrol-show-res.local.txt"
  for v in $PARSERS; do
    scontrol --json="$v" show reservations 2>/dev/null | compact > "$out/scontrol-res.$v.json" \
      2>/dev/null || true
    [[ -s "$out/scontrol-res.$v.json" ]] || rm -f "$out/scontrol-res.$v.json"
  done
  sock="$(dirname "$SLURM_CONF")/slurmrestd.sock"
  if [[ -S "$sock" ]]; then
    for v in v0.0.38 $PARSERS; do
      curl -sf --unix-socket "$sock" "http://x/slurm/$v/reservations" 2>/dev/null | compact \
        > "$out/rest-$v-reservations.json" 2>/dev/null || true
      [[ -s "$out/rest-$v-reservations.json" ]] || rm -f "$out/rest-$v-reservations.json"
    done
  fi
  {
    echo "# Slurm $(sinfo -V | sed 's/^[^ ]* //') on tools/local-cluster --partitions both --rest, at $(date +%s):"
    echo "maint1   # v100-1, now for 60 min, Users=root, IGNORE_JOBS"
    echo "future1  # p100-1, from now+3600 for 60 min, Accounts=root, MAGNETIC"
    echo "flex1    # k80-1, now for 60 min, Users=root, FLEX,MAINT,IGNORE_JOBS"
    echo "notroot  # p100-2, now for 60 min, Users=-root (everyone but root), IGNORE_JOBS"
  } > "$out/scenario.txt"
  for v in maint1 future1 flex1 notroot; do scontrol delete ReservationName="$v" || true; done
}

capture_listing() {
  local out="$1" work
  work="$(mktemp -d)"; cd "$work"
  sbatch -o /dev/null -p gpu --hold --comment='gavel:type=ResNet-18 (batch size 16)' \
    --gres=gpu:1 --wrap 'sleep 600' >/dev/null
  sbatch -o /dev/null -p gpu --array=0-1 --comment=$'plain x|y\nsecond line 1|PENDING' \
    --gres=gpu:1 --wrap 'sleep 600' >/dev/null
  running() {  # N: wait until N jobs run (both array tasks take their ids as they start)
    for _ in $(seq 100); do
      [[ "$(squeue -h -t running -o %i | wc -l)" -ge "$1" ]] && return 0; sleep 0.2
    done
    echo "fewer than $1 jobs running" >&2; exit 1
  }
  running 2
  # a year's time limit: TimeLimit and EndTime printed as numbers
  sbatch -o /dev/null -p gpu -t 365-0 --comment=$'bad\xff\xfe\r\n' --gres=gpu:1 \
    --wrap 'sleep 600' >/dev/null
  running 3
  OUT="$out" python3 - <<'PY'
import os, subprocess
from slurm_gavel.backends.slurm.cli.commands import SlurmCommands
from slurm_gavel.backends.slurm.cli.json_format import detect_cli
from slurm_gavel.backends.slurm.cli.listing import listing_command
fmt = detect_cli(SlurmCommands(dict(os.environ)))
cmd = listing_command("|0123456789abcdef|", fmt.node_sharing_field, fmt.excluded_field)
env = {**os.environ, "SLURM_TIME_FORMAT": "%s", **cmd.env}
out = subprocess.run(cmd.argv, env=env, capture_output=True, check=True).stdout
open(os.environ["OUT"], "wb").write(out)
PY
  squeue -h -o %i | xargs -r scancel
  cd / && rm -rf "$work"
}

release_of() { sed -n 's/^[^ ]* \([0-9]*\.[0-9]*\)\..*/\1/p'; }
case "$mode" in
  local)
    : "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the local cluster}"
    release=$(sinfo -V | release_of)
    default="$here/$release/local-cluster"; [[ "$release" == 22.05 ]] && default="$here/22.05"
    out="${2:-$default}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
    capture_local "$out" ;;
  listing)
    : "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the local cluster}"
    release=$(sinfo -V | release_of)
    capture_listing "${2:-$here/$release/listing.txt}" ;;
  reservations)
    : "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the local cluster}"
    release=$(sinfo -V | release_of)
    out="${2:-$here/$release/reservations}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
    capture_reservations "$out" ;;
  chroot)
    root="${2:?capture.sh chroot needs the chroot (chroot-cluster.sh start ROOT ...)}"
    release=$(chroot "$root" sinfo -V | release_of)
    out="${3:-$here/$release}"; mkdir -p "$out"; out="$(cd "$out" && pwd)"
    capture_chroot "$root" "$out" ;;
  *) echo "capture.sh: unknown mode $mode (local, reservations, listing or chroot)" >&2; exit 2 ;;
esac
