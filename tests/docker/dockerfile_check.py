"""Static checks of docker/Dockerfile: instructions, COPY sources that exist in the build
context and survive .dockerignore, and set-up by the scripts CI runs (tools/setup,
make -C spank), not by a second install path."""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from docker_entrypoints import SETUP_SCRIPTS, check_argv

DOCKERFILE_INSTRUCTIONS = {
    "FROM",
    "RUN",
    "COPY",
    "WORKDIR",
    "ENV",
    "CMD",
    "ENTRYPOINT",
    "ARG",
    "LABEL",
    "EXPOSE",
    "USER",
    "STOPSIGNAL",
    "HEALTHCHECK",
}


@dataclass
class Dockerfile:
    instructions: list[tuple[str, str]]  # (KEYWORD, arguments) with continuations joined
    workdir: str = "/"
    copies: list[list[str]] = field(default_factory=list)  # sources of each COPY
    runs: list[str] = field(default_factory=list)
    cmd: list[str] | None = None
    entrypoint: list[str] | None = None


def parse_dockerfile(text: str) -> Dockerfile:
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # comments may sit between continuation lines
        if stripped.endswith("\\"):
            pending += stripped[:-1].rstrip() + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    df = Dockerfile([])
    for line in lines:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        df.instructions.append((keyword, rest))
        if keyword == "WORKDIR":
            df.workdir = rest if rest.startswith("/") else f"{df.workdir.rstrip('/')}/{rest}"
        elif keyword == "COPY":
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            df.copies.append(words[:-1])
        elif keyword == "RUN":
            df.runs.append(rest)
        elif keyword in ("CMD", "ENTRYPOINT"):
            try:
                form = yaml.safe_load(rest)  # exec form is a JSON list
            except yaml.YAMLError:
                form = None
            value = form if isinstance(form, list) else ["<shell form>", rest]
            if keyword == "CMD":
                df.cmd = value
            else:
                df.entrypoint = value
    return df


def _ignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    if not path.exists():
        return []
    return [
        ln.strip().rstrip("/")
        for ln in path.read_text().splitlines()
        if ln.strip() and not ln.strip().startswith("#")
    ]


def _ignored(rel: str, patterns: list[str]) -> bool:
    return any(
        fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(rel, pat.removeprefix("**/"))
        for pat in patterns
        if not pat.startswith("!")
    )


def check_dockerfile(text: str, context: Path) -> list[str]:
    df = parse_dockerfile(text)
    problems: list[str] = []
    keywords = [k for k, _ in df.instructions]
    for k in keywords:
        if k not in DOCKERFILE_INSTRUCTIONS:
            problems.append(f"unknown or unsupported instruction {k}")
    if not keywords or keywords[0] not in ("FROM", "ARG"):
        problems.append("the first instruction must be FROM")
    bases = [rest.split()[0] for k, rest in df.instructions if k == "FROM"]
    if bases != ["debian:12"]:
        problems.append(f"base image must be debian:12 (what tools/setup supports): {bases}")
    patterns = _ignore_patterns(context)
    for sources in df.copies:
        for src in sources:
            rel = src.removeprefix("./").rstrip("/")
            if "://" in src or src.startswith("/") or ".." in Path(rel).parts:
                problems.append(f"COPY {src}: only paths inside the build context")
            elif not (context / rel).exists():
                problems.append(f"COPY {src}: no such file in the build context {context}")
            elif _ignored(rel, patterns):
                problems.append(f"COPY {src}: excluded by .dockerignore")
    if any(k == "ADD" for k in keywords):
        problems.append("use COPY, not ADD")
    run_text = "\n".join(df.runs)
    for script in SETUP_SCRIPTS:
        if script not in run_text:
            problems.append(f"no RUN calls {script} (the set-up CI runs)")
    for run in df.runs:
        if "apt-get install" in run and re.search(r"\b(slurm\w*|munge)\b", run):
            problems.append("Slurm/munge must come from tools/setup, not a RUN apt-get")
    for name, form in (("CMD", df.cmd), ("ENTRYPOINT", df.entrypoint)):
        if form is not None:
            problems += [f"Dockerfile {name}: {p}" for p in check_argv(form, df.workdir)]
    return problems
