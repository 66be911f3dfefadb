"""Where a managed job's own request lets it run ("constraints and types
bind"): its typed GPU request, its ``--constraint``, its ``--exclude``, and the memory
and CPUs it asks per node. Pure; view.py turns the answer into ObservedJob.allowed,
which the round honours twice: the job's row is zero on GPU types with no such node
(round_jobs.considered_jobs: the policy gives it nothing there) and the mechanism
places it only on those nodes (node_placement.place_chosen); act_plan refuses anything else.

What each request means, as Slurm reads it:

* ``--gres=gpu:p100:N`` / ``--gpus=p100:N``: only p100 GPUs. The Lua keeps the type
  (per node) and the daemon places the job with the same type, so the job's request
  names the user's type on every release and after every requeue;
* ``--constraint``: node features, ``&`` (and ``,``) for AND, ``|`` for OR, ``[...]``
  and ``(...)`` for grouping, ``!`` for NOT (23.02+), ``name*N`` read as ``name``
  (a node count: stricter, never looser). A bracketed OR in Slurm also asks that
  every node of the job take the same alternative; a job on one node, or on nodes of
  one kind, always does. An expression this parser cannot read keeps the job off
  every node, with the reason;
* ``--exclude``: never those nodes (the daemon never sets ExcNodeList);
* memory and CPUs: a node whose free memory or CPUs (what jobs the daemon does not
  manage leave) cannot hold the job's per-node request with its GPUs there is not
  for it. Each job is checked against each node alone here; act_plan adds up the
  jobs started on a node (managed_use) and holds back a start that would not fit.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

# Features a constraint may name (Slurm's feature names: no operators, no spaces).
_TOKEN = re.compile(r"\s*(?:([A-Za-z0-9_.:/+=-]+)(?:\*[0-9]+)?|([&,|!()\[\]]))")

Matcher = Callable[[frozenset[str]], bool]


class ConstraintError(ValueError):
    """A --constraint this parser cannot read."""


@dataclass(frozen=True)
class JobNeeds:
    """What a job asks of every node it runs on, beside its GPUs (from its JSON)."""

    features: str = ""  # the --constraint expression as Slurm keeps it ("" for none)
    excluded: tuple[str, ...] = ()  # --exclude, expanded
    memory_per_node_mb: int = 0  # --mem
    memory_per_cpu_mb: int = 0  # --mem-per-cpu (or DefMemPerCPU)
    memory_per_gpu_mb: int = 0  # --mem-per-gpu (kept only with a typed request)
    cpus_per_node: int = 1  # the job's minimum CPUs per node
    cpus_per_gpu: int = 0  # --cpus-per-gpu
    prefer: str = ""  # --prefer (23.02+): features wanted where they can be had

    def on_node(self, gpus: int) -> tuple[int, int]:
        """(memory MB, CPUs) the job needs on a node where it has ``gpus`` GPUs."""
        cpus = max(self.cpus_per_node, self.cpus_per_gpu * gpus)
        if self.memory_per_node_mb:
            memory = self.memory_per_node_mb
        elif self.memory_per_gpu_mb:
            memory = self.memory_per_gpu_mb * gpus
        else:
            memory = self.memory_per_cpu_mb * cpus
        return memory, cpus


NO_NEEDS = JobNeeds()


@dataclass(frozen=True)
class NodeRoom:
    """One node as a job's request sees it."""

    name: str
    gpu_type: str
    gpus: int
    features: frozenset[str]
    free_memory_mb: int | None  # None: Slurm does not count memory there
    free_cpus: int | None


def matcher(expr: str) -> Matcher:
    """The nodes (by feature set) a --constraint expression accepts; ConstraintError
    when it cannot be read."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = expr.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ConstraintError(f"cannot read --constraint {expr[:80]!r} at {text[pos:][:20]!r}")
        tokens.append(("name", m.group(1)) if m.group(1) else ("op", m.group(2)))
        pos = m.end()
    if not tokens:
        return lambda features: True
    parser = _Parser(tokens, expr)
    fn = parser.parse_or()
    if parser.i != len(tokens):
        raise ConstraintError(f"cannot read --constraint {expr[:80]!r}")
    return fn


class _Parser:
    """or := and ('|' and)*; and := unary (('&'|',') unary)*; unary := '!' unary | atom;
    atom := name | '(' or ')' | '[' or ']'."""

    def __init__(self, tokens: list[tuple[str, str]], expr: str) -> None:
        self.tokens = tokens
        self.expr = expr
        self.i = 0

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _fail(self) -> ConstraintError:
        return ConstraintError(f"cannot read --constraint {self.expr[:80]!r}")

    def parse_or(self) -> Matcher:
        parts = [self.parse_and()]
        while self._peek() == ("op", "|"):
            self.i += 1
            parts.append(self.parse_and())
        if len(parts) == 1:
            return parts[0]
        return lambda f: any(p(f) for p in parts)

    def parse_and(self) -> Matcher:
        parts = [self.parse_unary()]
        while self._peek() in (("op", "&"), ("op", ",")):
            self.i += 1
            parts.append(self.parse_unary())
        if len(parts) == 1:
            return parts[0]
        return lambda f: all(p(f) for p in parts)

    def parse_unary(self) -> Matcher:
        tok = self._peek()
        if tok == ("op", "!"):
            self.i += 1
            inner = self.parse_unary()
            return lambda f: not inner(f)
        if tok is None:
            raise self._fail()
        kind, value = tok
        self.i += 1
        if kind == "name":
            return lambda f: value in f
        close = {"(": ")", "[": "]"}.get(value)
        if close is None:
            raise self._fail()
        inner = self.parse_or()
        if self._peek() != ("op", close):
            raise self._fail()
        self.i += 1
        return inner


def allowed_nodes(
    gpu_type: str | None, scale: int, needs: JobNeeds, nodes: Iterable[NodeRoom]
) -> tuple[frozenset[str], str]:
    """The nodes this job may be placed on and, when that leaves out some of the
    nodes given, why (one line naming the request and the fix)."""
    try:
        match = matcher(needs.features) if needs.features else None
    except ConstraintError as e:
        return frozenset(), f"{e}; Slurm's forms: a&b, a|b, [a|b], (a|b)&c"
    excluded = set(needs.excluded)
    out: set[str] = set()
    why: dict[str, int] = {}
    for n in nodes:
        if gpu_type is not None and n.gpu_type != gpu_type:
            why[f"it asks for {gpu_type} GPUs"] = 1
            continue
        if match is not None and not match(n.features):
            why[f"--constraint={needs.features}"] = 1
            continue
        if n.name in excluded:
            why["--exclude"] = 1
            continue
        per_node = min(scale, n.gpus) if n.gpus else scale
        # a job bigger than one node spreads over nodes of this size
        per_node = max(1, per_node)
        memory, cpus = needs.on_node(per_node)
        if n.free_memory_mb is not None and memory > n.free_memory_mb:
            why[f"{memory} MB memory per node"] = 1
            continue
        if n.free_cpus is not None and cpus > n.free_cpus:
            why[f"{cpus} CPUs per node"] = 1
            continue
        out.add(n.name)
    reason = ""
    if why:
        reason = "its request keeps it off some nodes (" + ", ".join(why) + ")"
    return frozenset(out), reason


def preferred_nodes(needs: JobNeeds) -> Matcher | None:
    """The matcher of the job's --prefer, None when it has none or it cannot be read
    (a preference is soft: an unreadable one is no preference)."""
    if not needs.prefer:
        return None
    try:
        return matcher(needs.prefer)
    except ConstraintError:
        return None


def free_room(total: int, used: int, managed_use: Mapping[str, int], name: str) -> int | None:
    """What jobs the daemon does not manage leave of a node's memory or CPUs (None where
    Slurm reports no total: not counted)."""
    if total <= 0:
        return None
    return max(0, total - max(0, used - managed_use.get(name, 0)))


def per_node_gpus(scale: int, node_count: int) -> int:
    return max(1, math.ceil(scale / max(1, node_count)))


def managed_use(
    jobs: Iterable[tuple[JobNeeds, Iterable[tuple[str, int]]]],
) -> tuple[dict[str, int], dict[str, int]]:
    """Memory (MB) and CPUs per node that these jobs hold or will hold: each a job's
    needs and its (node, GPUs there)."""
    memory: dict[str, int] = {}
    cpus: dict[str, int] = {}
    for needs, slices in jobs:
        for node, gpus in slices:
            mb, c = needs.on_node(gpus)
            memory[node] = memory.get(node, 0) + mb
            cpus[node] = cpus.get(node, 0) + c
    return memory, cpus
