"""The package's layering, read from the import statements of its source (docs/design.md §3).

The core (slurm_gavel.core and the policies) imports no backend, no simulator and no
daemon, so the simulator and the daemon run the very same round; each other layer
imports only what is below it (LAYERS); the round sees the policies through their
package only (POLICIES_FACE); each feature of the round (a package under
slurm_gavel/core/) imports the round's modules, not another feature's (FEATURES,
CROSSINGS); the job library, installed alone on training
nodes, imports nothing of the rest (STANDALONE); and no two modules of the package (or of
the reference workloads) import each other, directly or round a loop. Every import counts: those
inside functions and under ``TYPE_CHECKING`` too, since a lazy import hides a
dependency without removing it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Each layer -> what it must not reach, directly or through the modules it imports.
# The domain (plain data and its contracts) is below everything; the policies (pure
# functions of the domain's problem) below the round (core: mechanism, round, features);
# the policies and the core are shared by the simulator and the daemon; the backends
# know Slurm, not the daemon; the simulator and the daemon never import each other; and
# nothing shipped imports the development tooling (slurm_gavel_dev is not in the wheel).
OUTER = ("slurm_gavel.commands", "slurm_gavel.cli", "slurm_gavel_dev")
ABOVE_POLICIES = (
    "slurm_gavel.core",
    "slurm_gavel.backends",
    "slurm_gavel.simulate",
    "slurm_gavel.daemon",
    "slurm_gavel.accounting",
    "slurm_gavel.profiling",
    "slurm_gavel.testing",
    "slurm_gavel.job",
    *OUTER,
)
LAYERS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("slurm_gavel.domain",): ("slurm_gavel.policies", *ABOVE_POLICIES),
    ("slurm_gavel.policies",): ABOVE_POLICIES,
    ("slurm_gavel.core",): (
        "slurm_gavel.backends",
        "slurm_gavel.simulate",
        "slurm_gavel.daemon",
        "slurm_gavel.accounting",
        "slurm_gavel.profiling",
        "slurm_gavel.job",
        *OUTER,
    ),
    ("slurm_gavel.backends",): ("slurm_gavel.daemon", "slurm_gavel.simulate", *OUTER),
    ("slurm_gavel.simulate",): ("slurm_gavel.daemon", *OUTER),
    ("slurm_gavel.daemon",): ("slurm_gavel.simulate", *OUTER),
    ("slurm_gavel.accounting", "slurm_gavel.profiling"): ("slurm_gavel.daemon", *OUTER),
    # the fake Slurm (shipped for tests) drives the Slurm backend, nothing above it
    ("slurm_gavel.testing",): ("slurm_gavel.daemon", "slurm_gavel.simulate", *OUTER),
    ("slurm_gavel",): ("slurm_gavel_dev",),
}
# Nothing crosses a layer's wall, not even an exception class.
ALLOWED: tuple[str, ...] = ()
# The one module of the job library the scheduler imports: the progress report's format,
# which jobs write and the daemon reads (a contract between the two, not the scheduler's
# identity: its version and error types are its own).
SHARED_WITH_JOBS = ("slurm_gavel.job.progress",)
# Packages installed alone, without the rest of slurm_gavel: they import nothing of it
# outside themselves (not even slurm_gavel/__init__.py). The job library is the
# slurm-gavel-job distribution (jobpkg/) that training nodes install on its own; the
# rest imports it (ALLOWED above is that direction), never the other way round.
STANDALONE = ("slurm_gavel.job",)


def modules(packages: Iterable[str], root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file under the packages."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(mods: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of `mods` it imports (a from-import of a submodule
    names the submodule, of anything else the module it comes from)."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here[: len(here) - node.level + 1]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                for a in node.names:
                    if f"{source}.{a.name}" in mods:
                        deps.add(f"{source}.{a.name}")
                    elif source in mods:
                        deps.add(source)
        graph[name] = deps
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (or a module that
    imports itself): Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return found


def reachable(graph: Mapping[str, set[str]], start: str) -> dict[str, str]:
    """Every module `start` imports, directly or not -> the module that imports it."""
    via: dict[str, str] = {}
    todo = [start]
    while todo:
        node = todo.pop()
        for dep in graph[node]:
            if dep not in via and dep != start:
                via[dep] = node
                todo.append(dep)
    return via


def _in(module: str, prefixes: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _chain(via: Mapping[str, str], dep: str, module: str) -> str:
    chain = [dep]
    while chain[-1] != module:
        chain.append(via[chain[-1]])
    return " <- ".join(chain)


def leaks(
    graph: Mapping[str, set[str]], layer: Iterable[str], forbidden: Iterable[str]
) -> list[str]:
    """Each import chain from a module of `layer` to a forbidden one: dep <- ... <- module."""
    found = []
    for module in sorted(m for m in graph if _in(m, layer)):
        via = reachable(graph, module)
        for dep in sorted(d for d in via if _in(d, forbidden) and d not in ALLOWED):
            found.append(_chain(via, dep, module))
    return found


def escapes(graph: Mapping[str, set[str]], package: str) -> list[str]:
    """Each import chain from a module of `package` to a module of the graph outside it."""
    found = []
    for module in sorted(m for m in graph if _in(m, [package])):
        via = reachable(graph, module)
        found += [_chain(via, d, module) for d in sorted(via) if not _in(d, [package])]
    return found


def test_each_layer_imports_only_what_is_below_it() -> None:
    mods = modules(["slurm_gavel", "slurm_gavel_dev"])
    graph = import_graph(mods)
    assert "slurm_gavel.policies.solvers.lp" in graph and "slurm_gavel.core.scheduler" in graph
    found = [leak for layer, forbidden in LAYERS.items() for leak in leaks(graph, layer, forbidden)]
    assert not found, "a layer reaches outside it:\n" + "\n".join(found)


def test_the_job_library_imports_nothing_of_slurm_gavel_outside_it() -> None:
    graph = import_graph(modules(["slurm_gavel", "slurm_gavel_dev"]))
    assert "slurm_gavel.job.loop" in graph
    found = [chain for package in STANDALONE for chain in escapes(graph, package)]
    assert not found, "a package installed alone imports the rest:\n" + "\n".join(found)


def test_the_scheduler_takes_only_the_report_format_from_the_job_library() -> None:
    graph = import_graph(modules(["slurm_gavel", "slurm_gavel_dev"]))
    assert "slurm_gavel.daemon.spool" in graph
    found = sorted(
        f"{dep} <- {module}"
        for module, deps in graph.items()
        if not _in(module, STANDALONE)
        for dep in deps
        if _in(dep, STANDALONE) and dep not in SHARED_WITH_JOBS
    )
    assert not found, "the scheduler imports the job library beyond its reports:\n" + "\n".join(
        found
    )


def test_the_standalone_rule_sees_a_job_module_import_the_core(tmp_path: Path) -> None:
    # A throwaway tree laid out like the package: a job module that imports the core
    # (directly, lazily, or through another job module) or the package's __init__ is
    # found; imports within the job library, and of the job library by the rest, are not.
    job = tmp_path / "slurm_gavel" / "job"
    domain = tmp_path / "slurm_gavel" / "domain"
    job.mkdir(parents=True)
    domain.mkdir()
    (tmp_path / "slurm_gavel" / "__init__.py").write_text("__version__ = '0'\n")
    (domain / "__init__.py").write_text("")
    (domain / "comment_grammar.py").write_text("from slurm_gavel.job._errors import InputError\n")
    (job / "__init__.py").write_text("from slurm_gavel.job.env import read_env\n")
    (job / "_errors.py").write_text("class InputError(ValueError): ...\n")
    (job / "env.py").write_text("from ._errors import InputError\n")
    graph = import_graph(modules(["slurm_gavel"], root=tmp_path))
    assert escapes(graph, "slurm_gavel.job") == []
    (job / "tool.py").write_text(
        "def main():\n    from slurm_gavel.domain import comment_grammar\n"
    )
    (job / "loop.py").write_text(
        "import slurm_gavel.job.tool\nfrom slurm_gavel import __version__\n"
    )
    graph = import_graph(modules(["slurm_gavel"], root=tmp_path))
    assert escapes(graph, "slurm_gavel.job") == [
        "slurm_gavel <- slurm_gavel.job.loop",
        "slurm_gavel.domain.comment_grammar <- slurm_gavel.job.tool <- slurm_gavel.job.loop",
        "slurm_gavel.domain.comment_grammar <- slurm_gavel.job.tool",
    ]


# The Slurm backend's walls: the round's logic (backends/slurm/ outside cli/ and rest/)
# knows no transport, the CLI transport knows nothing of slurmrestd; the REST transport
# may hold the CLI one (its scontrol fallbacks), and each transport builds its backend.
TRANSPORT_NEUTRAL = "slurm_gavel.backends.slurm"
TRANSPORTS = ("slurm_gavel.backends.slurm.cli", "slurm_gavel.backends.slurm.rest")


def test_the_slurm_backends_round_logic_knows_no_transport() -> None:
    graph = import_graph(modules(["slurm_gavel"]))
    assert "slurm_gavel.backends.slurm.backend" in graph
    neutral = [m for m in graph if _in(m, [TRANSPORT_NEUTRAL]) and not _in(m, TRANSPORTS)]
    assert "slurm_gavel.backends.slurm.preemption" in neutral
    found = []
    for module in sorted(neutral):
        via = reachable(graph, module)
        found += [_chain(via, d, module) for d in sorted(via) if _in(d, TRANSPORTS)]
    found += leaks(graph, [TRANSPORTS[0]], [TRANSPORTS[1]])
    assert not found, "the Slurm backend's walls are crossed:\n" + "\n".join(found)


# The round (slurm_gavel.core) sees the policies through their package's face
# (slurm_gavel/policies/__init__.py: the policies by name, their options, the moldable
# counts' LP), never a policy's module or the solvers behind them, so the policies can
# be rearranged without touching the round.
POLICIES_FACE = "slurm_gavel.policies"


def behind_the_face(graph: Mapping[str, set[str]]) -> list[str]:
    """Each direct import of a module of the core from inside the policies' package."""
    return [
        f"{dep} <- {module}"
        for module in sorted(m for m in graph if _in(m, ["slurm_gavel.core"]))
        for dep in sorted(graph[module])
        if _in(dep, [POLICIES_FACE]) and dep != POLICIES_FACE
    ]


def test_the_round_sees_the_policies_only_through_their_package() -> None:
    graph = import_graph(modules(["slurm_gavel"]))
    assert POLICIES_FACE in graph["slurm_gavel.core.scheduler"]
    found = behind_the_face(graph)
    assert not found, "the round imports the policies' internals:\n" + "\n".join(found)


def test_the_face_rule_sees_an_import_of_a_solver(tmp_path: Path) -> None:
    (tmp_path / "slurm_gavel" / "core").mkdir(parents=True)
    (tmp_path / "slurm_gavel" / "policies" / "solvers").mkdir(parents=True)
    for f in ("__init__.py", "policies/__init__.py", "policies/solvers/__init__.py",
              "policies/solvers/lp.py", "core/__init__.py"):  # fmt: skip
        (tmp_path / "slurm_gavel" / f).write_text("")
    (tmp_path / "slurm_gavel" / "core" / "a.py").write_text(
        "from slurm_gavel.policies import allocate\n"
    )
    (tmp_path / "slurm_gavel" / "core" / "b.py").write_text(
        "from slurm_gavel.policies.solvers.lp import solve_lp\n"
    )
    graph = import_graph(modules(["slurm_gavel"], tmp_path))
    assert behind_the_face(graph) == ["slurm_gavel.policies.solvers.lp <- slurm_gavel.core.b"]


def test_no_import_cycles() -> None:
    mods = modules(["slurm_gavel", "slurm_gavel_dev", "workloads"])
    found = cycles(import_graph(mods))
    assert not found, "modules that import each other (directly or round a loop):\n" + (
        "\n".join(" <-> ".join(c) for c in found)
    )


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    # The checks above pass on an empty graph too: these show they find a cycle, a
    # self-import, what a module reaches, and imports written every way the package does.
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["d"]]
    assert reachable(graph, "e") == {"a": "e", "b": "a", "c": "b"}
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub.leaf import x\n")
    (pkg / "sub" / "leaf.py").write_text("from .. import top\nx = 1\n")
    (pkg / "top.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.lazy\n"
    )
    (pkg / "lazy.py").write_text("def f():\n    from pkg import sub\n    from pkg.sub import x\n")
    tiny = import_graph(modules(["pkg"], root=tmp_path))
    assert tiny == {
        "pkg": set(),
        "pkg.lazy": {"pkg.sub"},
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": {"pkg.top"},
        "pkg.top": {"pkg.lazy"},
    }
    assert cycles(tiny) == [["pkg.lazy", "pkg.sub", "pkg.sub.leaf", "pkg.top"]]
    mods = modules(["slurm_gavel"])
    graph = import_graph(mods)
    assert "slurm_gavel.domain.model" in graph["slurm_gavel.core.mechanism"]
    assert "slurm_gavel.policies.solvers.lp" in graph["slurm_gavel.policies.solvers.mm_lp"]
    assert _in("slurm_gavel.daemon.hooked_backend", ["slurm_gavel.daemon"])
    assert not _in("slurm_gavel.daemon_x", ["slurm_gavel.daemon"])
    assert leaks({"a.x": {"b.y"}, "b.y": {"c.z"}, "c.z": set()}, ["a"], ["c"]) == [
        "c.z <- b.y <- a.x"
    ]


# The round's features, one package each under slurm_gavel/core/ (the plugin, its
# settings, its state and its logic). A feature imports the round's interfaces (the
# modules of slurm_gavel.core outside these packages: stages, config, state, report,
# mechanism) and not another feature's modules, save the crossings below, each with why.
# The other way is the round's: plugin_settings gathers the features' settings,
# scheduler_state.PluginSlots their state, round_plugins.pipeline_for their plugins, and
# round_config/round_jobs/scheduler read the learned rows' Knowledge and rows, the
# re-solve rule (relearn) and the restart cost the rounds plan with (restart_aware).
FEATURES = (
    "slurm_gavel.core.baseline",
    "slurm_gavel.core.learned_rows",
    "slurm_gavel.core.moldable",
    "slurm_gavel.core.restart_aware",
    "slurm_gavel.core.restart_costs",
    "slurm_gavel.core.space_sharing",
    "slurm_gavel.core.unresponsive_nodes",
)
CROSSINGS: dict[tuple[str, str], str] = {
    # a restart's cost as the rounds plan it (measured, the job's own, the configured
    # overhead) is restart_aware.restart_cost; learned rows allow it before progress
    # counts, moldable counts weigh it against a count's gain
    (
        "slurm_gavel.core.learned_rows.learned_rows_plugin",
        "slurm_gavel.core.restart_aware.restart_aware",
    ): "restart_cost",
    (
        "slurm_gavel.core.moldable.moldable_plugin",
        "slurm_gavel.core.restart_aware.restart_aware",
    ): "restart_cost",
    # a moldable job's count is chosen from its learned row at each count (the rows'
    # Knowledge, measurements and their JSON cells)
    (
        "slurm_gavel.core.moldable.moldable_plugin",
        "slurm_gavel.core.learned_rows.job_rows",
    ): "Knowledge",
    ("slurm_gavel.core.moldable.mold_round", "slurm_gavel.core.learned_rows.job_rows"): "rows",
    (
        "slurm_gavel.core.moldable.mold_memory_doc",
        "slurm_gavel.core.learned_rows.job_rows",
    ): "Measured",
    (
        "slurm_gavel.core.moldable.mold_memory_doc",
        "slurm_gavel.core.learned_rows.job_rows_doc",
    ): "a measured cell's JSON, shared",
    # protection reads the measured costs' "none measured" mark
    (
        "slurm_gavel.core.restart_aware.restart_aware",
        "slurm_gavel.core.restart_costs.restart_costs",
    ): "NONE_MEASURED",
}


def feature_of(module: str) -> str | None:
    return next((f for f in FEATURES if _in(module, [f])), None)


def crossings(graph: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """Each direct import of a feature's module from another feature's."""
    return sorted(
        (module, dep)
        for module, deps in graph.items()
        if feature_of(module) is not None
        for dep in deps
        if feature_of(dep) not in (None, feature_of(module))
    )


def test_a_feature_imports_the_round_not_another_features_internals() -> None:
    graph = import_graph(modules(["slurm_gavel"]))
    assert all(f in graph for f in FEATURES)
    found = crossings(graph)
    unexpected = [f"{dep} <- {module}" for module, dep in found if (module, dep) not in CROSSINGS]
    assert not unexpected, "a feature imports another's internals:\n" + "\n".join(unexpected)
    # and no crossing is listed that is gone: the list says what is true
    assert sorted(CROSSINGS) == found


def test_the_feature_rule_sees_a_crossing() -> None:
    graph = {
        "slurm_gavel.core.moldable.mold_round": {"slurm_gavel.core.round_stages"},
        "slurm_gavel.core.baseline.b": {"slurm_gavel.core.moldable.mold_round", "slurm_gavel.core"},
        "slurm_gavel.core.round_stages": {"slurm_gavel.core.baseline.b"},
    }
    assert crossings(graph) == [
        ("slurm_gavel.core.baseline.b", "slurm_gavel.core.moldable.mold_round")
    ]
