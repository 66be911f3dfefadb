"""Configuration files of the local Slurm cluster (tools/local-cluster).

Pure text generation from a topology such as ``v100:2x4,p100:2x4,k80:2x4`` (two
nodes of four GPUs per type): slurm.conf, gres.conf (empty files stand in for
GPU devices, which slurmd accepts), plugstack.conf. Standard library only.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TOPOLOGY = "v100:2x4,p100:2x4,k80:2x4"
DEFAULT_PORT_BASE = 6817
SHARED_PARTITION = "gpu"
REQUEUE_HOLD_EXIT = 99  # the exit code that means "checkpointed, hold me in the queue"
NODE_CPUS = 16
NODE_MEMORY_MB = 64000
DEF_MEM_PER_CPU_MB = 1000  # a job that names no memory: 1 GB per CPU


class ClusterError(RuntimeError):
    """A one-line, actionable failure of the local cluster tool."""


HOST_RELEASE = "22.05"  # the host's (Debian 12) packages; the others run in a chroot


@dataclass(frozen=True)
class Release:
    """A Slurm release the local cluster can run, and where it comes from."""

    name: str  # "24.11"
    suite: str | None  # Debian suite of its chroot; None = the host's packages
    apt_options: tuple[str, ...] = ()
    # How slurmrestd agrees to run as root (see localcluster_rest).
    rest_security: str = "disable_user_check"
    # 26.05's slurmrestd runs as root only to become each client's user (become_user),
    # and refuses that when SlurmUser is root: there slurmctld runs as user slurm.
    slurm_user: str = "root"

    @property
    def in_chroot(self) -> bool:
        return self.suite is not None


RELEASES = {
    "22.05": Release("22.05", None),
    "24.11": Release("24.11", "trixie"),
    # sid's InRelease on the mirror can be past its Valid-Until: signatures are still
    # checked, only the expiry is ignored.
    "26.05": Release(
        "26.05", "sid", ('Acquire::Check-Valid-Until "false"',), "become_user", "slurm"
    ),
}


def release(name: str) -> Release:
    try:
        return RELEASES[name]
    except KeyError:
        raise ClusterError(
            f"--slurm {name}: unknown release; choose one of {', '.join(RELEASES)}"
        ) from None


@dataclass(frozen=True)
class NodeGroup:
    gpu_type: str
    nodes: int
    gpus_per_node: int


def parse_topology(text: str) -> list[NodeGroup]:
    """``v100:2x4,k80:1x8`` -> groups; a clear error for anything else."""
    groups: list[NodeGroup] = []
    for part in text.split(","):
        part = part.strip()
        try:
            gpu_type, shape = part.split(":")
            nodes, gpus = (int(x) for x in shape.lower().split("x"))
        except ValueError:
            raise ClusterError(
                f"--topology: cannot read {part!r}; write TYPE:NODESxGPUS, e.g. v100:2x4"
            ) from None
        if not gpu_type.isidentifier() or nodes < 1 or gpus < 1:
            raise ClusterError(f"--topology: {part!r} needs a plain type name and positive counts")
        if any(g.gpu_type == gpu_type for g in groups):
            raise ClusterError(f"--topology: type {gpu_type} appears twice")
        groups.append(NodeGroup(gpu_type, nodes, gpus))
    return groups


@dataclass
class ClusterSpec:
    """Everything `up` was asked for; stored in cluster.json to make `up` idempotent."""

    topology: str = DEFAULT_TOPOLOGY
    partitions: str = "both"  # per-type | shared | both
    port_base: int = DEFAULT_PORT_BASE
    spank: list[str] = field(default_factory=list)  # "optional PATH" / "required PATH"
    hold_on_arrival: bool = True  # JobSubmitPlugins=lua with conf/slurm/job_submit.lua
    slurm: str = HOST_RELEASE  # the release: the host's packages, or a chroot
    accounting: bool = False  # slurmdbd + MariaDB (localcluster_accounting)
    shards: int = 0  # gres/shard per fake GPU (0: none); docs/admin-guide.md, shard set-up

    def node_names(self) -> list[tuple[str, NodeGroup]]:
        return [
            (f"{g.gpu_type}-{i}", g)
            for g in parse_topology(self.topology)
            for i in range(1, g.nodes + 1)
        ]

    def ports(self) -> list[int]:
        """slurmctld, one slurmd port per node, then slurmdbd's and MariaDB's."""
        count = len(self.node_names()) + 1 + (2 if self.accounting else 0)
        return [self.port_base + i for i in range(count)]


def slurm_conf_text(spec: ClusterSpec, run: Path) -> str:
    """The slurm.conf for the spec; run-dir paths so several clusters can coexist."""
    host = socket.gethostname().split(".")[0]
    lines = [
        "# Written by tools/local-cluster; edits are overwritten on the next `up`.",
        f"ClusterName=gavel{spec.port_base}",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={spec.port_base}",
        f"SlurmUser={release(spec.slurm).slurm_user}",
        "AuthType=auth/munge",
        *_munge_lines(spec, run),
        f"StateSaveLocation={run}/state",
        f"SlurmdSpoolDir={run}/spool/%n",
        f"SlurmctldPidFile={run}/state/slurmctld.pid",  # where SlurmUser may write
        f"SlurmdPidFile={run}/slurmd-%n.pid",
        f"SlurmctldLogFile={run}/log/slurmctld.log",
        f"SlurmdLogFile={run}/log/slurmd-%n.log",
        f"PlugStackConfig={run}/plugstack.conf",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # The host has a couple of cores; let each emulated node claim more.
        "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres",
        # Memory is consumable, as at real centres: a node with a free GPU and no free
        # memory is not free. A job that names no memory gets DefMemPerCPU per CPU.
        "SelectTypeParameters=CR_Core_Memory",
        f"DefMemPerCPU={DEF_MEM_PER_CPU_MB}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        *accounting_lines(spec, run),
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=bf_interval=5,sched_min_interval=100000",
        "PriorityType=priority/basic",
        "GresTypes=gpu,shard" if spec.shards else "GresTypes=gpu",
        # The managed-job protocol: exit 99 = checkpointed, requeue and hold.
        "JobRequeue=1",
        f"RequeueExitHold={REQUEUE_HOLD_EXIT}",
        # Fast timers so tests are quick.
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "MessageTimeout=10",
        "KillWait=5",
        "MinJobAge=300",
        "InactiveLimit=0",
        "ReturnToService=2",
        "MaxJobCount=20000",
    ]
    if spec.hold_on_arrival:
        lines.append("JobSubmitPlugins=lua")
    names = spec.node_names()
    for i, (name, g) in enumerate(names):
        lines.append(
            f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
            f"Port={spec.port_base + 1 + i} CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} "
            # The GPU type as a node feature too, as centres do (--constraint=v100)
            f"Feature={g.gpu_type} "
            f"Gres=gpu:{g.gpu_type}:{g.gpus_per_node}{_shard_gres(spec, g)} State=UNKNOWN"
        )
    groups = parse_topology(spec.topology)
    if spec.partitions not in ("per-type", "shared", "both"):
        raise ClusterError("--partitions must be per-type, shared or both")
    default_set = False
    if spec.partitions in ("shared", "both"):
        lines.append(
            f"PartitionName={SHARED_PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
        )
        default_set = True
    if spec.partitions in ("per-type", "both"):
        for g in groups:
            default = "NO" if default_set else "YES"
            default_set = True
            lines.append(
                f"PartitionName={g.gpu_type} Nodes={g.gpu_type}-[1-{g.nodes}] "
                f"Default={default} MaxTime=INFINITE State=UP"
            )
    return "\n".join(lines) + "\n"


def dbd_port(spec: ClusterSpec) -> int:
    return spec.port_base + len(spec.node_names()) + 1


def accounting_lines(spec: ClusterSpec, run: Path) -> list[str]:
    """slurm.conf's accounting lines: none, or slurmdbd on loopback with the comment."""
    if not spec.accounting:
        return ["AccountingStorageType=accounting_storage/none"]
    # Connections to slurmdbd find munge through AccountingStoragePass, not AuthInfo:
    # a chroot release's own munged is on its own socket.
    own_munge = release(spec.slurm).in_chroot
    return [
        *([f"AccountingStoragePass={run}/munge/munge.socket"] if own_munge else []),
        "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=127.0.0.1",
        f"AccountingStoragePort={dbd_port(spec)}",
        # The gavel: comment in the database, for `trace from-sacct` and `report`.
        "AccountingStoreFlags=job_comment",
        # GPUs per type in sacct's TRES (AllocTRES gres/gpu:v100=2).
        "AccountingStorageTRES=gres/gpu,gres/gpu:" + ",gres/gpu:".join(_gpu_types(spec)),
    ]


def _gpu_types(spec: ClusterSpec) -> list[str]:
    return list(dict.fromkeys(g.gpu_type for _, g in spec.node_names()))


def in_chroot(spec: ClusterSpec) -> bool:
    """Every release but the host's (22.05) runs in a chroot with a munged of its own."""
    return release(spec.slurm).in_chroot


def _munge_lines(spec: ClusterSpec, run: Path) -> list[str]:
    if not in_chroot(spec):
        return []  # the host's munged, on its default socket
    # This cluster's own munged (its key, its socket): clusters never share one.
    return [f"AuthInfo=socket={run}/munge/munge.socket", "CredType=cred/munge"]


def _shard_gres(spec: ClusterSpec, g: NodeGroup) -> str:
    if spec.shards < 0:
        raise ClusterError(f"--shards {spec.shards}: give a count of shards per GPU, 0 for none")
    return f",shard:{spec.shards * g.gpus_per_node}" if spec.shards else ""


def gres_conf_text(spec: ClusterSpec, run: Path) -> str:
    lines = ["# Written by tools/local-cluster: empty files stand in for GPU devices."]
    for name, g in spec.node_names():
        files = f"{run}/dev/{name}/gpu[0-{g.gpus_per_node - 1}]"
        lines.append(f"NodeName={name} Name=gpu Type={g.gpu_type} File={files}")
        if spec.shards:
            # Shards need no File=: slurmd spreads Count evenly over the node's GPUs.
            lines.append(f"NodeName={name} Name=shard Count={spec.shards * g.gpus_per_node}")
    return "\n".join(lines) + "\n"


def write_config(spec: ClusterSpec, run: Path) -> None:
    for sub in ("state", "log", "spool", "dev"):
        (run / sub).mkdir(parents=True, exist_ok=True)
    for name, g in spec.node_names():
        (run / "spool" / name).mkdir(parents=True, exist_ok=True)
        dev = run / "dev" / name
        dev.mkdir(parents=True, exist_ok=True)
        for k in range(g.gpus_per_node):
            (dev / f"gpu{k}").touch()
    (run / "slurm.conf").write_text(slurm_conf_text(spec, run))
    (run / "gres.conf").write_text(gres_conf_text(spec, run))
    if in_chroot(spec):
        # No cgroup hierarchy is usable inside the chroot; without this 24.11's slurmd
        # stops with "Unable to initialize cgroup plugin".
        (run / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    (run / "plugstack.conf").write_text(
        "# Written by tools/local-cluster (--spank adds lines here).\n"
        + "".join(f"{line}\n" for line in spec.spank)
    )
    if spec.hold_on_arrival:
        # slurmctld reads job_submit.lua from slurm.conf's directory.
        lua = (REPO / "conf" / "slurm" / "job_submit.lua").read_text()
        # each user's last refusal in this cluster's own folder (22.05 users read
        # it with `slurm-gavel refused --dir DIR/refused`)
        refused = run / "refused"
        refused.mkdir(exist_ok=True)
        refused.chmod(0o711)
        line = 'local REFUSALS_DIR = "/var/spool/slurm-gavel/refused"'
        if line not in lua:
            raise ClusterError(f"conf/slurm/job_submit.lua has no line {line!r}")
        lua = lua.replace(line, f'local REFUSALS_DIR = "{refused}"')
        (run / "job_submit.lua").write_text(lua)
