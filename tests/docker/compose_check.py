"""Static checks of docker-compose.yml's structure: the subset of the compose
specification it uses (keys, types, durations, ports), volume and dependency references,
and the files it names. No Docker engine runs in CI, and the compose-spec JSON schema is
not at hand there, so this is a hand-written check of exactly what the file uses."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

TOP_KEYS = {"name", "services", "volumes", "networks", "configs", "secrets"}
SERVICE_KEYS = {
    "image",
    "build",
    "command",
    "entrypoint",
    "environment",
    "volumes",
    "depends_on",
    "healthcheck",
    "network_mode",
    "ports",
    "init",
    "hostname",
    "working_dir",
    "stop_grace_period",
    "restart",
}
BUILD_KEYS = {"context", "dockerfile"}
HEALTH_KEYS = {"test", "interval", "timeout", "retries", "start_period"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
RESTART = re.compile(r"^(no|always|unless-stopped|on-failure(:\d+)?)$")
DURATION = re.compile(r"^(\d+(\.\d+)?(us|ms|s|m|h))+$")
PORT = re.compile(r"^((\d{1,3}(\.\d{1,3}){3}):)?(\d+:)?\d+(/(tcp|udp))?$")


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def volume_parts(spec: str) -> tuple[str, str, str]:
    parts = spec.split(":")
    if len(parts) == 2:
        return parts[0], parts[1], "rw"
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return "", "", "?"


def check_compose(doc: Any, base: Path) -> list[str]:
    """`base` is the directory of the compose file (relative paths start there)."""
    if not isinstance(doc, Mapping):
        return ["the compose file is not a mapping"]
    problems = [
        f"unknown top-level key {k!r}"
        for k in doc
        if k not in TOP_KEYS and not str(k).startswith("x-")
    ]
    services = doc.get("services")
    if not isinstance(services, Mapping) or not services:
        return [*problems, "no services"]
    volumes = doc.get("volumes") or {}
    for name, svc in services.items():
        problems += [f"services.{name}: {p}" for p in _check_service(svc, services, volumes, base)]
    return problems


def _check_service(svc: Any, services: Mapping, volumes: Mapping, base: Path) -> list[str]:
    if not isinstance(svc, Mapping):
        return ["not a mapping"]
    out = [f"unknown key {k!r}" for k in svc if k not in SERVICE_KEYS]
    if "image" not in svc and "build" not in svc:
        out.append("needs image or build")
    build = svc.get("build")
    if build is not None:
        if not isinstance(build, Mapping) or set(build) - BUILD_KEYS or "context" not in build:
            out.append("build: a mapping with context (and dockerfile)")
        else:
            context = (base / build["context"]).resolve()
            dockerfile = context / build.get("dockerfile", "Dockerfile")
            if not context.is_dir():
                out.append(f"build.context {build['context']}: no such directory")
            elif not dockerfile.is_file():
                out.append(f"build.dockerfile {build.get('dockerfile')}: no such file")
    for key in ("command", "entrypoint"):
        if key in svc and not _strings(svc[key]):
            out.append(f"{key}: write it as a list of strings (exec form)")
    env = svc.get("environment", {})
    if not isinstance(env, Mapping) or not all(
        isinstance(v, str | int | float) for v in env.values()
    ):
        out.append("environment: a mapping of names to values")
    for spec in svc.get("volumes", []):
        out += _check_volume(spec, volumes, base)
    deps = svc.get("depends_on", {})
    for dep, how in deps.items() if isinstance(deps, Mapping) else []:
        if dep not in services:
            out.append(f"depends_on: no service {dep!r}")
        if not isinstance(how, Mapping) or how.get("condition") not in CONDITIONS:
            out.append(f"depends_on.{dep}: condition must be one of {sorted(CONDITIONS)}")
    mode = svc.get("network_mode")
    if mode is not None:
        target = str(mode).removeprefix("service:")
        if str(mode).startswith("service:") and target not in services:
            out.append(f"network_mode: no service {target!r}")
        if str(mode).startswith("service:") and ("ports" in svc or "hostname" in svc):
            out.append("ports/hostname conflict with network_mode service:")
    for port in svc.get("ports", []):
        if not PORT.match(str(port)):
            out.append(f"ports: cannot read {port!r}")
    hc = svc.get("healthcheck")
    if hc is not None:
        if not isinstance(hc, Mapping) or set(hc) - HEALTH_KEYS:
            out.append(f"healthcheck: keys are {sorted(HEALTH_KEYS)}")
        else:
            test = hc.get("test")
            if not _strings(test) or test[0] != "CMD":
                out.append('healthcheck.test: write it as ["CMD", ...] (exec form)')
            for key in ("interval", "timeout", "start_period"):
                if key in hc and not DURATION.match(str(hc[key])):
                    out.append(f"healthcheck.{key}: {hc[key]!r} is not a duration")
    if "stop_grace_period" in svc and not DURATION.match(str(svc["stop_grace_period"])):
        out.append("stop_grace_period: not a duration")
    if "restart" in svc and not RESTART.match(str(svc["restart"])):
        out.append(f"restart: {svc['restart']!r} is not a restart policy")
    if "init" in svc and not isinstance(svc["init"], bool):
        out.append("init: true or false")
    return out


def _check_volume(spec: Any, volumes: Mapping, base: Path) -> list[str]:
    if not isinstance(spec, str):
        return [f"volumes: write {spec!r} as SOURCE:TARGET[:ro]"]
    src, dst, mode = volume_parts(spec)
    if mode not in ("ro", "rw") or not dst.startswith("/"):
        return [f"volumes: cannot read {spec!r} as SOURCE:/TARGET[:ro|rw]"]
    if src.startswith((".", "/")):
        if not (base / src).exists():
            return [f"volumes: {src} does not exist (relative to {base})"]
    elif src not in volumes:
        return [f"volumes: named volume {src!r} is not declared under top-level volumes"]
    return []
