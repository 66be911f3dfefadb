"""How docker-compose.yml's services fit together, checked with the project's own code:
every command and healthcheck runs a tested entry point with arguments its parser
accepts; the topology parses with the cluster tool's parser and uses GPU types of the
shipped table; the daemon config passes the daemon's validator and names partitions
the generated slurm.conf has; the two containers share what they must (slurm.conf,
munge socket, progress spool, network). ``check_all`` runs every layer."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from compose_check import check_compose, volume_parts
from docker_entrypoints import BUILT_IN_IMAGE, SETUP_SCRIPTS, check_argv, parse_argv
from dockerfile_check import Dockerfile, check_dockerfile, parse_dockerfile

from slurm_gavel.daemon.config import load_config
from slurm_gavel.daemon.config_types import ConfigError
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel_dev.localcluster_conf import (
    ClusterError,
    ClusterSpec,
    parse_topology,
    slurm_conf_text,
)

MUNGE_SOCKET_DIR = "/run/munge"


def _mounts(svc: Mapping) -> dict[str, str]:
    """Container path -> source (named volume or host path)."""
    return {volume_parts(v)[1]: volume_parts(v)[0] for v in svc.get("volumes", [])}


def _host_file(svc: Mapping, container_path: str, base: Path) -> Path | None:
    for target, src in _mounts(svc).items():
        if container_path == target and src.startswith((".", "/")):
            return (base / src).resolve()
    return None


def _on_volume(svc: Mapping, path: str) -> str | None:
    for target, src in _mounts(svc).items():
        if path == target or path.startswith(target.rstrip("/") + "/"):
            return src
    return None


# (entry point, subcommand) -> the role a service plays
ROLES = {("tools/local-cluster", "up"): "cluster", (".venv/bin/slurm-gavel", "run"): "daemon"}
Role = tuple[str, Mapping, argparse.Namespace]  # service name, service, parsed command


def check_wiring(doc: Mapping, base: Path, dockerfile: Dockerfile) -> list[str]:
    problems: list[str] = []
    roles: dict[str, list[Role]] = {"cluster": [], "daemon": []}
    for name, svc in doc["services"].items():
        workdir = svc.get("working_dir", dockerfile.workdir)
        if workdir != dockerfile.workdir:
            problems.append(
                f"services.{name}.working_dir: the repository is at "
                f"{dockerfile.workdir} in the image"
            )
        if "healthcheck" in svc:
            problems += [
                f"services.{name}.healthcheck: {p}"
                for p in check_argv(svc["healthcheck"]["test"][1:], workdir)
            ]
        argv = list(svc.get("command") or dockerfile.cmd or [])
        found = check_argv(argv, workdir)
        problems += [f"services.{name}.command: {p}" for p in found]
        if not found:
            exe, args = parse_argv(argv, workdir)
            role = ROLES.get((exe, args.command))
            if role:
                roles[role].append((name, svc, args))
    if [len(r) for r in roles.values()] != [1, 1]:
        return [
            *problems,
            "need exactly one `tools/local-cluster up` service and one "
            f"`slurm-gavel run` service, found {roles}",
        ]
    return (
        problems
        + _check_cluster(roles["cluster"][0], dockerfile)
        + _check_daemon(roles["daemon"][0], roles["cluster"][0], base)
    )


def _check_cluster(role: Role, df: Dockerfile) -> list[str]:
    name, _svc, args = role
    where = f"services.{name}.command"
    out = [] if args.foreground else [f"{where}: needs --foreground (the container's process)"]
    try:
        groups = parse_topology(args.topology)
    except ClusterError as e:
        return [*out, f"{where}: {e}"]
    if len(groups) < 2:
        out.append(f"{where}: the topology should mix GPU types, got {args.topology}")
    known = set(load_table().gpu_types)
    out += [
        f"{where}: GPU type {g.gpu_type} is not in the shipped throughput table"
        for g in groups
        if g.gpu_type not in known
    ]
    for item in args.spank:
        path = item.partition(":")[0]
        if BUILT_IN_IMAGE.get(path) not in [
            s for s in SETUP_SCRIPTS if any(s in r for r in df.runs)
        ]:
            out.append(f"{where}: --spank {path} is not built by the Dockerfile")
    return out


def _check_daemon(daemon: Role, cluster: Role, base: Path) -> list[str]:
    dname, dsvc, dargs = daemon
    cname, csvc, cargs = cluster
    out: list[str] = []
    if dsvc.get("network_mode") != f"service:{cname}":
        out.append(
            f"services.{dname}: network_mode must be service:{cname} "
            "(slurm.conf addresses slurmctld at 127.0.0.1)"
        )
    conf_dir = str(cargs.dir)
    if dsvc.get("environment", {}).get("SLURM_CONF") != f"{conf_dir}/slurm.conf":
        out.append(f"services.{dname}.environment.SLURM_CONF must be {conf_dir}/slurm.conf")
    shared = [(conf_dir, "the cluster's run dir"), (MUNGE_SOCKET_DIR, "the munge socket")]
    host_config = _host_file(dsvc, dargs.config, base)
    if host_config is None:
        return [*out, f"services.{dname}: --config {dargs.config} is not a mounted file"]
    try:
        config = load_config(host_config)
    except ConfigError as e:
        return [*out, f"services.{dname}: {e}"]
    spec = ClusterSpec(topology=cargs.topology, partitions=cargs.partitions)
    try:
        conf = slurm_conf_text(spec, Path(conf_dir))  # the generator `up` writes with
    except ClusterError:
        return out  # the cluster check reports the topology
    made = {
        line.split()[0].removeprefix("PartitionName=")
        for line in conf.splitlines()
        if line.startswith("PartitionName=")
    }
    out += [
        f"{host_config}: partition {p!r} is not in the cluster (it has {sorted(made)})"
        for p in config.partitions
        if p not in made
    ]
    if _on_volume(dsvc, str(config.state_dir)) is None:
        out.append(f"{host_config}: state_dir {config.state_dir} is on no volume (lost on restart)")
    if config.progress_dir is not None:
        shared.append((str(config.progress_dir), "the progress spool"))
        if csvc.get("environment", {}).get("GAVEL_PROGRESS_DIR") != str(config.progress_dir):
            out.append(
                f"services.{cname}.environment.GAVEL_PROGRESS_DIR must be "
                f"{config.progress_dir} (the daemon's progress_dir)"
            )
    for path, what in shared:
        src_d, src_c = _on_volume(dsvc, path), _on_volume(csvc, path)
        if src_d is None or src_d != src_c or src_d.startswith((".", "/")):
            out.append(f"{path} ({what}) must be one named volume in {cname} and {dname}")
    if config.metrics_port:
        published = [str(p).rsplit(":", 1)[-1] for p in csvc.get("ports", [])]
        if str(config.metrics_port) not in published:
            out.append(
                f"services.{cname}.ports: publish the daemon's metrics_port {config.metrics_port}"
            )
    return out


def check_all(compose: Path) -> list[str]:
    """Every check on a compose file, its Dockerfile and the daemon config it mounts."""
    return check_document(yaml.safe_load(compose.read_text()), compose.parent)


def check_document(doc: Any, base: Path) -> list[str]:
    """check_all on a decoded compose document; `base` is the compose file's directory."""
    problems = check_compose(doc, base)
    if problems:
        return problems
    builds = {
        (svc["build"]["context"], svc["build"].get("dockerfile", "Dockerfile"))
        for svc in doc["services"].values()
        if "build" in svc
    }
    if len(builds) != 1:
        return [f"expected one image built by every service, found builds {sorted(builds)}"]
    context_rel, dockerfile_rel = builds.pop()
    context = (base / context_rel).resolve()
    text = (context / dockerfile_rel).read_text()
    problems += check_dockerfile(text, context)
    return problems + check_wiring(doc, base, parse_dockerfile(text))
