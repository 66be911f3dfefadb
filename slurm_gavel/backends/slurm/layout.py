"""A job's node layout as its request fixes it: how many nodes it must run on.

`sbatch --nodes=2 --ntasks-per-node=1 --gres=gpu:1` (one rank per node, the usual DDP
layout) must run on two nodes with one GPU each. Packed onto one node with two GPUs,
22.05 finds its tasks per node unsatisfiable (BadConstraints: never runnable) and 26.05
starts it with one rank instead of two. So a job whose request names several nodes
(node_count > 1: -N, or -n over --ntasks-per-node) or a task count per node keeps that
node count in every placement (core/node_placement.py): NumNodes=N-N and its GPUs per
node, which leaves the record saying the same N to the next read.

job_submit.lua makes the request say its layout where the GPUs alone would not: it
counts a per-node GPU request over the nodes `-n` and `--ntasks-per-node` make, and
gives a job of several GPUs a task (`--gpus-per-task=2`) a task count per node, so
that one task's GPUs are never spread over two nodes (the layouts it cannot fix it
refuses at submit).

A job without either may run on any number of nodes (the mechanism's best fit, or the
fewest nodes where no node has room). Once the daemon has spread such a job, its record
says the node count it was given, indistinguishable from a user's -N; the count is
therefore read once per job, at its first observation (SlurmBackend keeps it), when the
record is still the user's. A daemon restarted while such a job was spread reads that
spread as its layout and keeps it: the job runs as it ran. Pure.
"""

from __future__ import annotations

from slurm_gavel.backends.slurm.records import SlurmJob


def asked_nodes(sj: SlurmJob) -> int | None:
    """The exact node count the job's request fixes; None when any layout will do."""
    if sj.tasks_per_node > 0:
        by_tasks = -(-max(1, sj.tasks) // sj.tasks_per_node)  # ceil
        return max(1, sj.node_count, by_tasks)
    if sj.node_count > 1:
        return sj.node_count
    return None


def layout_why(scale: int, nodes: int) -> str:
    """Why a job of ``scale`` GPUs cannot be laid out on ``nodes`` nodes ("" when it
    can): the daemon sets one GPU count per node (Slurm's per-node GRES request)."""
    if scale % nodes == 0:
        return ""
    return (
        f"its {scale} GPUs cannot be spread evenly over the {nodes} nodes it asks for "
        f"(-N/--ntasks-per-node); ask a multiple of {nodes} GPUs (--gres=gpu:K per node)"
    )
