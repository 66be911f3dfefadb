#!/bin/bash
# A managed job for the integration tests: counts steps, checkpoints on SIGUSR1
# (the daemon's preemption signal) and exits 99 (RequeueExitHold: Slurm requeues
# and holds it); on restart (SLURM_RESTART_COUNT > 0) it resumes from the file.
# Usage: sbatch ... checkpoint_job.sh CHECKPOINT_FILE [STEPS]
ckpt="${1:?checkpoint file}"
steps="${2:-100000}"
step=0
if [[ "${SLURM_RESTART_COUNT:-0}" -gt 0 && -f "$ckpt" ]]; then
  step="$(cut -d' ' -f1 "$ckpt")"
fi
echo "start restart=${SLURM_RESTART_COUNT:-0} step=$step node=${SLURMD_NODENAME:-?}" >> "$ckpt.log"
on_usr1() {
  # after the last step the work is done: finish rather than be requeued (as
  # slurm_gavel.job does when the signal lands during the last step)
  (( step >= steps )) && return
  echo "$step ${SLURM_RESTART_COUNT:-0}" > "$ckpt"
  echo "checkpoint step=$step" >> "$ckpt.log"
  exit 99
}
trap on_usr1 USR1
while (( step < steps )); do
  step=$((step + 1))
  # sleep in the background and wait: bash runs the trap as soon as USR1 arrives.
  sleep 0.2 & wait $!
done
echo "done step=$step" >> "$ckpt.log"
