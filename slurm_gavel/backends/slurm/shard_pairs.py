"""Space-sharing pairs on Slurm through gres/shard: who shares a GPU (as Slurm reports
it), how many GPUs that is, and what each job of a pair asks for. Pure; the facts per
release are in docs/admin-guide.md, shard set-up."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from slurm_gavel.backends.slurm.records import RUNNING_STATES, SlurmJob, SlurmNode
from slurm_gavel.domain.cluster_model import JobPlacement, RoundPlacement
from slurm_gavel.domain.model import JobId


def running(jobs: Iterable[SlurmJob]) -> Iterable[SlurmJob]:
    return (sj for sj in jobs if sj.state in RUNNING_STATES)


def holds_half_a_gpu(sj: SlurmJob, nodes: Mapping[str, SlurmNode]) -> bool:
    """Whether the job holds some but not all of a GPU's shards somewhere (all of them
    is that GPU alone: a whole GPU asked as shards)."""
    for s in sj.gpu_slices:
        node = nodes.get(s.node)
        per_gpu = node.shards // node.gpus if node is not None and node.gpus else 0
        if s.shards and s.shards < per_gpu * max(1, len(s.indices)):
            return True
    return False


def managed_gpus(jobs: Iterable[SlurmJob]) -> dict[str, int]:
    """GPUs per node the managed jobs hold: a GPU two jobs share as shards counts once."""
    counts: dict[str, int] = {}
    by_index: set[tuple[str, int]] = set()
    for sj in running(jobs):
        for s in sj.gpu_slices:
            if s.indices:
                by_index.update((s.node, i) for i in s.indices)
            else:
                counts[s.node] = counts.get(s.node, 0) + s.gpus
    for node, _ in by_index:
        counts[node] = counts.get(node, 0) + 1
    return counts


def shard_partners(jobs: Iterable[SlurmJob]) -> dict[JobId, JobId]:
    """Running jobs that hold shards of exactly the same GPUs, two by two: what Slurm
    says really shares (the GPU indices of gres_detail), not what was asked."""
    groups: dict[tuple[tuple[str, tuple[int, ...]], ...], list[JobId]] = {}
    for sj in running(jobs):
        key = tuple(sorted((s.node, s.indices) for s in sj.gpu_slices if s.shards))
        if key and all(idx for _, idx in key) and len(key) == len(sj.gpu_slices):
            groups.setdefault(key, []).append(sj.job_id)
    out: dict[JobId, JobId] = {}
    for ids in groups.values():
        if len(ids) == 2:
            out[ids[0]], out[ids[1]] = ids[1], ids[0]
    return out


def pair_on_shards(jp: JobPlacement, nodes: Mapping[str, SlurmNode]) -> int | str:
    """Shards per node each job of a pair asks for so that the two fill one GPU, or why
    Slurm cannot put the pair on one GPU (docs/admin-guide.md, shard set-up)."""
    if any(s.gpus != 1 for s in jp.nodes) or len(jp.nodes) != 1:
        return (
            f"a pair on {jp.gpus} GPUs: only one-GPU pairs can share through gres/shard "
            "(a job's shards come from one GPU of a node)"
        )
    node = nodes.get(jp.nodes[0].node)
    if node is None or node.gpus == 0:
        return f"unknown node {jp.nodes[0].node}"
    per_gpu = node.shards // node.gpus
    if per_gpu < 2 or per_gpu % 2 or node.shards % node.gpus:
        return (
            f"node {node.name} has {node.shards} gres/shard for {node.gpus} GPUs; sharing "
            "needs an even count of at least 2 per GPU (GresTypes=gpu,shard, "
            "docs/admin-guide.md, shard set-up)"
        )
    return per_gpu // 2


def whole_gpu_as_shards(jp: JobPlacement, nodes: Mapping[str, SlurmNode]) -> int | str:
    """A job that once asked for shards goes on asking for shards: Slurm 22.05 refuses
    any gpu request on it afterwards ("Invalid generic resource"). All the shards of
    one GPU are that GPU alone, since a job's shards come from one GPU."""
    per_gpu = {
        n.shards // n.gpus if n.gpus and n.shards and not n.shards % n.gpus else 0
        for n in (nodes[s.node] for s in jp.nodes)
    }
    if any(s.gpus != 1 for s in jp.nodes) or len(per_gpu) != 1 or 0 in per_gpu:
        return (
            f"it ran on shards before, and Slurm refuses a gpu request on such a job; "
            f"as shards it can only have one GPU per node ({jp.gpus} GPUs on "
            f"{','.join(s.node for s in jp.nodes)} asked, each with the same shards per GPU)"
        )
    return per_gpu.pop()


@dataclass(frozen=True)
class StartOrder:
    """Make a waiting job run on these nodes: scontrol update ... + release."""

    job_id: JobId
    partition: str
    gpu_type: str
    gpus_per_node: int
    nodes: tuple[str, ...]
    shards: int = 0  # gres/shard per node instead of whole GPUs (one job of a pair)
    # The job's own request names its GPU type (--gres=gpu:p100:1): the update keeps
    # that type, since 22.05 refuses to turn a typed request into an untyped one
    # ("Invalid GRES specification (with and without type identification)").
    typed: bool = False

    def gres(self) -> str:
        if self.shards:
            return f"shard:{self.shards}"  # untyped, as below
        if self.typed:
            return f"gpu:{self.gpu_type}:{self.gpus_per_node}"
        # Untyped on purpose: the node list fixes the type, and Slurm 22.05 makes a
        # job "never runnable" (BadConstraints) once its GRES type is changed by an
        # update (gpu:v100:2 -> gpu:k80:1), while gpu:2 -> gpu:1 on other nodes works.
        return f"gpu:{self.gpus_per_node}"


@dataclass(frozen=True)
class AfterExit:
    """A pair member that starts once ``holder``, stopping this round, has left the
    half GPU it would otherwise land beside (started after the act's wait for exits)."""

    order: StartOrder
    holder: JobId
    partner: JobId | None

    @property
    def why(self) -> str:
        return (
            f"pair waits: job {self.holder} stops this round; its shards are not free yet, "
            "and Slurm would put this job beside it"
        )


def defer_pairs_beside_leaving_shards(
    starts: list[StartOrder],
    failed: list[tuple[JobId, str]],
    leaving: Iterable[JobId],
    managed: Mapping[JobId, SlurmJob],
    nodes: Mapping[str, SlurmNode],
    placement: RoundPlacement,
    after_exit: list[AfterExit] | None = None,
) -> None:
    """Slurm gives shards first fit: a pair member started while another job holds
    half of a GPU on its node (one stopping this round, or one running on alone) lands
    beside that job, and its partner on another GPU. Such a pair does not start with
    the round's other starts. Beside a job that stops this round it goes into
    ``after_exit`` (when given): the backend starts it once the stopping jobs have
    exited, in the same act. Otherwise it waits (failed says why) until the half is
    free."""
    gone = set(leaving)
    paired = shard_partners(managed.values())
    busy: dict[str, tuple[JobId, str]] = {}
    for sj in running(managed.values()):
        if not holds_half_a_gpu(sj, nodes):
            continue
        if sj.job_id in gone:
            why = "stops this round; its shards are not free yet"
        elif sj.job_id not in paired:
            why = "runs alone on half a GPU there"
        else:
            continue
        for s in sj.gpu_slices:
            if s.shards:
                busy.setdefault(s.node, (sj.job_id, why))
    deferred: dict[JobId, tuple[JobId, str]] = {}
    for o in starts:
        partner = placement.jobs[o.job_id].partner
        holder = busy.get(o.nodes[0]) if o.shards and partner is not None else None
        if holder is not None and holder[0] != partner:
            deferred[o.job_id] = holder
    starting = {o.job_id for o in starts}
    for job_id, holder in list(deferred.items()):
        partner = placement.jobs[job_id].partner
        if partner is not None and partner in starting:
            deferred.setdefault(partner, holder)
    if not deferred:
        return
    orders = {o.job_id: o for o in starts}
    starts[:] = [o for o in starts if o.job_id not in deferred]
    for j, (who, why) in deferred.items():
        partner = placement.jobs[j].partner
        pair_leaving = all(
            deferred[k][0] in gone for k in (j, partner) if k is not None and k in deferred
        )
        if after_exit is not None and pair_leaving:
            after_exit.append(AfterExit(orders[j], who, partner))
        else:
            failed.append(
                (j, f"pair waits: job {who} {why}, and Slurm would put this job beside it")
            )


def lone_half_warnings(
    managed: Mapping[JobId, SlurmJob],
    jobs: Iterable[SlurmJob],
    partners: Mapping[JobId, JobId],
    nodes: Mapping[str, SlurmNode],
) -> list[str]:
    """What is worth a warning about managed jobs alone on half a GPU. Alone is normal
    (the partner ended, was preempted, or waits to start: the next pair placed there
    fills the half), so it is not. Two such halves on different GPUs of one node are
    (the shards of a GPU idle twice over: a pair Slurm's first fit split, or two pairs
    that each lost a job), and so is a half shared with a job the daemon does not
    manage (a user's own --gres=shard job beside a managed one)."""
    everyone = shard_partners(jobs)
    lone = [
        sj
        for sj in running(managed.values())
        if sj.job_id not in partners and holds_half_a_gpu(sj, nodes)
    ]
    out: list[str] = []
    by_node: dict[str, list[tuple[JobId, tuple[int, ...]]]] = {}
    for sj in lone:
        other = everyone.get(sj.job_id)
        halves = [s for s in sj.gpu_slices if s.shards]
        where = ", ".join(f"{s.node} GPU {list(s.indices) or '?'}" for s in halves)
        if other is not None:
            out.append(
                f"job {sj.job_id} shares {where} with job {other}, which is not a managed job "
                "(a user's own gres/shard job): its speed there is not the table's"
            )
            continue
        for s in halves:
            by_node.setdefault(s.node, []).append((sj.job_id, s.indices))
    for node, held in sorted(by_node.items()):
        if len({idx for _, idx in held}) > 1:
            out.append(
                f"jobs {', '.join(j for j, _ in held)} each hold half of a different GPU of "
                f"node {node} ({', '.join(f'{j}: GPU {list(i)}' for j, i in held)}): "
                "the other halves idle (a pair split by Slurm's first fit, or pairs that "
                "each lost a job); the next rounds place them again"
            )
    return out


def lone_shard_holders(
    managed: Mapping[JobId, SlurmJob], nodes: Mapping[str, SlurmNode]
) -> dict[str, JobId]:
    """Per node, a running managed job on shards with no partner (half a GPU in use)."""
    paired = shard_partners(managed.values())
    return {
        s.node: sj.job_id
        for sj in running(managed.values())
        if sj.job_id not in paired and holds_half_a_gpu(sj, nodes)
        for s in sj.gpu_slices
        if s.shards
    }
