"""docker/ checked statically: no Docker engine runs in CI, so the containers themselves
are never started here (docker/README.md says so). The shipped files pass every check,
and each check rejects a file broken in the way it guards against."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker_entrypoints import REPO
from dockerfile_check import _ignored, check_dockerfile, parse_dockerfile
from wiring_check import check_all, check_document

from slurm_gavel_dev import localcluster_cli
from slurm_gavel_dev.localcluster_conf import ClusterSpec, parse_topology

DOCKER = REPO / "docker"
COMPOSE = DOCKER / "docker-compose.yml"
DOCKERFILE = DOCKER / "Dockerfile"


def _doc() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def test_the_shipped_files_pass_every_check():
    assert check_all(COMPOSE) == []


def test_the_cluster_service_starts_several_slurmds_of_mixed_types():
    """Parsed by the cluster tool's own parser, as the container will run it."""
    argv = _doc()["services"]["cluster"]["command"]
    assert argv[0] == "tools/local-cluster"
    args = localcluster_cli.parser().parse_args(argv[1:])
    assert (args.command, args.foreground) == ("up", True)
    spec = ClusterSpec(topology=args.topology, partitions=args.partitions)
    nodes = spec.node_names()
    assert len(nodes) >= 3
    assert len({g.gpu_type for g in parse_topology(args.topology)}) >= 2


def test_every_service_builds_the_one_image_from_the_docker_folder():
    for svc in _doc()["services"].values():
        assert (DOCKER / svc["build"]["context"]).resolve() == REPO
        assert svc["build"]["dockerfile"] == "docker/Dockerfile"


def test_dockerfile_copies_only_existing_paths_and_runs_the_tested_setup():
    df = parse_dockerfile(DOCKERFILE.read_text())
    assert df.copies and all((REPO / src).exists() for srcs in df.copies for src in srcs)
    assert any("tools/setup" in run for run in df.runs)
    assert df.cmd is not None and df.cmd[0] == "tools/local-cluster"


# --- the compose checks reject broken files ---------------------------------------------

Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def _drop(path: str) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            node = node[key]
        del node[last]

    return mutate


def _cluster_arg(option: str, value: str | None) -> Mutation:
    """Replace an option's value in the cluster command (None removes the option)."""

    def mutate(doc: dict[str, Any]) -> None:
        argv = doc["services"]["cluster"]["command"]
        i = argv.index(option)
        if value is None:
            del argv[i : i + (1 if option == "--foreground" else 2)]
        else:
            argv[i + 1] = value

    return mutate


def _daemon_volumes(edit: Callable[[list[str]], list[str]]) -> Mutation:
    def mutate(doc: dict[str, Any]) -> None:
        svc = doc["services"]["daemon"]
        svc["volumes"] = edit(svc["volumes"])

    return mutate


MUTATIONS: dict[str, tuple[Mutation, str]] = {
    "missing bind-mounted file": (
        _daemon_volumes(lambda v: ["./nope.yaml:/etc/slurm-gavel/gavel.yaml:ro", *v[1:]]),
        "nope.yaml does not exist",
    ),
    "missing build context": (
        _set("services.daemon.build", {"context": "../nowhere"}),
        "no such directory",
    ),
    "missing Dockerfile": (
        _set("services.cluster.build.dockerfile", "docker/Nope"),
        "no such file",
    ),
    "undeclared named volume": (
        _daemon_volumes(lambda v: [*v, "scratch:/scratch"]),
        "'scratch' is not declared",
    ),
    "untested command": (
        _set("services.cluster.command", ["/usr/sbin/slurmctld", "-D"]),
        "not a tested entry point",
    ),
    "shell-form command": (_set("services.daemon.command", "slurm-gavel run"), "exec form"),
    "option the tool lacks": (
        _set("services.cluster.command.1", "start"),
        "rejected by its parser",
    ),
    "daemon option it lacks": (
        _set("services.daemon.command.2", "--cfg"),
        "rejected by its parser",
    ),
    "unreadable topology": (_cluster_arg("--topology", "v100:2"), "TYPE:NODESxGPUS"),
    "one GPU type only": (_cluster_arg("--topology", "v100:3x4"), "should mix GPU types"),
    "GPU type without throughputs": (
        _cluster_arg("--topology", "v100:1x4,h100:1x4"),
        "h100 is not in the shipped throughput table",
    ),
    "no foreground": (_cluster_arg("--foreground", None), "needs --foreground"),
    "plugin the image does not build": (
        _cluster_arg("--spank", "spank/other.so"),
        "not built by the Dockerfile",
    ),
    "partitions without the shared one": (
        _cluster_arg("--partitions", "per-type"),
        "partition 'gpu' is not in the cluster",
    ),
    "untested healthcheck": (
        _set("services.cluster.healthcheck.test", ["CMD", "sinfo"]),
        "not a tested entry point",
    ),
    "shell healthcheck": (
        _set("services.cluster.healthcheck.test", ["CMD-SHELL", "sinfo"]),
        "exec form",
    ),
    "bad duration": (_set("services.cluster.healthcheck.interval", "10 sec"), "not a duration"),
    "unknown service key": (_set("services.daemon.privileged", True), "unknown key"),
    "unknown top-level key": (_set("service", {}), "unknown top-level key"),
    "dependency on nothing": (
        _set("services.daemon.depends_on", {"db": {"condition": "service_healthy"}}),
        "no service 'db'",
    ),
    "restart policy": (_set("services.daemon.restart", "sometimes"), "restart policy"),
    "ports beside a shared network": (
        _set("services.daemon.ports", ["9464:9464"]),
        "conflict with network_mode",
    ),
    "own network for the daemon": (
        _drop("services.daemon.network_mode"),
        "network_mode must be service:cluster",
    ),
    "other slurm.conf": (
        _set("services.daemon.environment.SLURM_CONF", "/etc/slurm/slurm.conf"),
        "SLURM_CONF must be",
    ),
    "no munge socket": (
        _daemon_volumes(lambda v: [x for x in v if "/run/munge" not in x]),
        "the munge socket",
    ),
    "private progress spool": (
        _daemon_volumes(lambda v: [x.replace("progress:", "mine:") for x in v]),
        "not declared",
    ),
    "progress dir not exported": (
        _set("services.cluster.environment.GAVEL_PROGRESS_DIR", "/tmp/p"),
        "GAVEL_PROGRESS_DIR must be",
    ),
    "metrics not published": (_drop("services.cluster.ports"), "publish the daemon's"),
    "no daemon": (
        _set("services.daemon.command", [".venv/bin/slurm-gavel", "status"]),
        "exactly one",
    ),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_a_broken_compose_file_is_rejected(case: str):
    mutate, expected = MUTATIONS[case]
    doc = copy.deepcopy(_doc())
    mutate(doc)
    problems = check_document(doc, DOCKER)
    assert any(expected in p for p in problems), problems


def _with_config(tmp_path: Path, text: str) -> list[str]:
    cfg = tmp_path / "gavel.yaml"
    cfg.write_text(text)
    doc = _doc()
    vols = doc["services"]["daemon"]["volumes"]
    vols[0] = f"{cfg}:/etc/slurm-gavel/gavel.yaml:ro"
    return check_document(doc, DOCKER)


def test_the_daemon_config_is_checked_by_the_daemons_validator(tmp_path):
    shipped = (DOCKER / "gavel.yaml").read_text()
    assert _with_config(tmp_path, shipped) == []
    problems = _with_config(tmp_path, shipped.replace("round_seconds:", "round_secnds:"))
    assert any("unknown key 'round_secnds'" in p for p in problems), problems
    problems = _with_config(tmp_path, shipped.replace("  - gpu", "  - a100"))
    assert any("partition 'a100' is not in the cluster" in p for p in problems), problems
    problems = _with_config(tmp_path, shipped.replace("/var/lib/slurm-gavel/state", "/srv/s"))
    assert any("state_dir /srv/s is on no volume" in p for p in problems), problems


# --- the Dockerfile checks reject broken files ------------------------------------------

DOCKERFILE_MUTATIONS = {
    "missing COPY source": (("COPY conf conf", "COPY config config"), "COPY config: no such file"),
    "COPY outside the context": (("COPY conf conf", "COPY ../etc etc"), "inside the build"),
    "other base": (("FROM debian:12", "FROM ubuntu:22.04"), "base image must be debian:12"),
    "second install path": (
        ("RUN tools/setup", "RUN apt-get install -y slurmd && tools/setup"),
        "must come from tools/setup",
    ),
    "no tools/setup": (("RUN tools/setup && ", "RUN "), "no RUN calls tools/setup"),
    "no plugin build": (("&& make -C spank ", ""), "no RUN calls make -C spank"),
    "untested CMD": (
        ('CMD ["tools/local-cluster"', 'CMD ["slurmctld"'),
        "not a tested entry point",
    ),
    "CMD the tool rejects": (('"--foreground"', '"--forground"'), "rejected by its parser"),
    "ADD": (("COPY conf conf", "ADD conf conf"), "use COPY, not ADD"),
}


@pytest.mark.parametrize("case", sorted(DOCKERFILE_MUTATIONS))
def test_a_broken_dockerfile_is_rejected(case: str):
    (old, new), expected = DOCKERFILE_MUTATIONS[case]
    text = DOCKERFILE.read_text()
    assert old in text, f"the mutation no longer applies: {old!r}"
    problems = check_dockerfile(text.replace(old, new, 1), REPO)
    assert any(expected in p for p in problems), problems


def test_dockerignore_must_not_drop_a_copied_path(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "Dockerfile").write_text(
        DOCKERFILE.read_text().replace("COPY conf conf", "COPY src src")
    )
    copied = ("pyproject.toml", "README.md", "LICENSE", "requirements-ci.lock", "jobpkg")
    for rel in (*copied, "slurm_gavel", "slurm_gavel_dev", "tools", "spank", "workloads"):
        (tmp_path / rel).mkdir() if "." not in rel else (tmp_path / rel).touch()
    (tmp_path / ".dockerignore").write_text("# sources stay out\nsrc\n")
    problems = check_dockerfile((tmp_path / "Dockerfile").read_text(), tmp_path)
    assert problems == ["COPY src: excluded by .dockerignore"]
    assert _ignored("spank/__pycache__", ["**/__pycache__"])


def test_continuation_lines_and_comments_inside_them_are_joined():
    df = parse_dockerfile("FROM debian:12\nRUN a \\\n  # note\n  && b\nWORKDIR /x\nWORKDIR y\n")
    assert df.runs == ["a && b"]
    assert df.workdir == "/x/y"
