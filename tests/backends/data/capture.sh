#!/usr/bin/env bash
# Regenerate the JSON captures in this folder from a real local cluster:
#   tools/local-cluster up --dir /tmp/capture --port-base auto
#   SLURM_CONF=/tmp/capture/slurm.conf tests/backends/data/capture.sh [OUTDIR]
#   tools/local-cluster down --dir /tmp/capture
# It builds one scenario with every state the parsers must read: managed jobs
# held on arrival, running on one and on two nodes, checkpointed (exit 99 ->
# SPECIAL_EXIT, held); non-managed running/pending jobs; completed, failed and
# cancelled jobs; a drained node with a job on it, an idle drained node and a
# down node. Needs the default topology (v100:2x4,p100:2x4,k80:2x4).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
job="$here/../jobs/checkpoint_job.sh"
out="$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)"
work="$(mktemp -d)"
cd "$work"
: "${SLURM_CONF:?set SLURM_CONF to the slurm.conf of the local cluster}"
sub() { sbatch --parsable -o /dev/null "$@"; }
place() {  # JOBID PARTITION GRES NODES NUMNODES: what the daemon does to start a job
  scontrol update JobId="$1" Partition="$2" Gres="$3" NodeList="$4" NumNodes="$5" StartTime=now
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
scontrol update NodeName=k80-2 State=DOWN Reason=capture-down
sleep 1
squeue --json > "$out/squeue-22.05.json"
squeue --json --all > /dev/null
sinfo --json > "$out/sinfo-22.05.json"
scontrol show job --oneliner > "$out/scontrol-show-job-22.05.txt"
scontrol show node --oneliner > "$out/scontrol-show-node-22.05.txt"
echo "held=$held run1=$run1 multi=$multi ckpt=$ckpt unmanaged=$unmanaged" \
     "unmanaged_pending=$unmanaged_pending ok=$ok bad=$bad cancelled=$cancelled" \
     > "$out/scenario-22.05.txt"
scontrol update NodeName=p100-2,k80-2 State=RESUME
squeue -h -o %i | xargs -r scancel
rm -rf "$work"
