"""A real multi-node Slurm cluster on one machine, for tests and the demo.

`tools/local-cluster up|down|status|rest|env` runs this module. It writes a
slurm.conf/gres.conf for a topology such as ``v100:2x4,p100:2x4,k80:2x4`` (two
nodes of four GPUs per type; the GPUs are empty files, which slurmd accepts as
devices), starts munge if it is not running, one slurmctld and one ``slurmd -N``
per emulated node, and waits until every node is idle. ``--slurm 24.11|26.05``
runs that release from a Debian chroot instead of the host's 22.05
(localcluster_chroot: built on first use, its own munged, wrappers in DIR/bin that
`env` puts first on PATH). Every daemon it starts is recorded by pid in
``DIR/cluster.json`` and stopped by that pid on ``down``.

Standard library only, on purpose: the same module is the entrypoint of the
docker images, which have no virtual environment.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from slurm_gavel_dev import localcluster_accounting as accounting
from slurm_gavel_dev import localcluster_chroot as chroot
from slurm_gavel_dev.localcluster_conf import (
    REPO,
    ClusterError,
    ClusterSpec,
    write_config,
)
from slurm_gavel_dev.localcluster_host import (
    ensure_installed,
    ensure_munge,
    pick_port_base,
    port_free,
    which_sbin,
)
from slurm_gavel_dev.localcluster_state import (
    STATE_FILE,
    log_tail,
    read_state,
    running_daemons,
    save_state,
    terminate,
)
from slurm_gavel_dev.localcluster_state import (
    alive as _alive,
)
from slurm_gavel_dev.localcluster_state import (
    ours as _ours,
)

__all__ = ["down", "is_up", "read_state", "running_daemons", "slurm_env", "up"]
__all__ += ["_alive", "_ours", "pick_port_base"]  # for tests

DEFAULT_DIR = REPO / "run" / "cluster"


def slurm_env(run: Path) -> dict[str, str]:
    """The environment for Slurm's client commands: SLURM_CONF, and for a release in a
    chroot its wrappers first on PATH (callers keep calling `sinfo` by name)."""
    env = {**os.environ, "SLURM_CONF": str(run / "slurm.conf")}
    if (run / "bin").is_dir():
        env["PATH"] = f"{run / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def _release(state: dict) -> chroot.Release:
    return chroot.release(state.get("spec", {}).get("slurm", chroot.HOST_RELEASE))


# --- lifecycle -----------------------------------------------------------------------


def is_up(run: Path) -> bool:
    state = read_state(run)
    if not state:
        return False
    alive = running_daemons(run)
    daemons = ("slurmctld", "slurmdbd", "mariadbd")
    needed = [n for n in state.get("pids", {}) if n in daemons or n.startswith("slurmd:")]
    return all(name in alive for name in needed) and "slurmctld" in alive


def _start(
    run: Path,
    state: dict,
    name: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    *,
    on_host: bool = False,
) -> int:
    """Start one daemon (inside the release's chroot view where it has one, unless
    on_host: MariaDB) and record its pid. A command line read back from /proc (a
    restart) works too."""
    if _release(state).in_chroot and argv[0] != "chroot" and not on_host:
        argv = ["chroot", str(chroot.view(run)), *argv]
    out = open(run / "log" / f"{name.replace(':', '-')}.out", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env={**slurm_env(run), **(env or {})},
    )
    out.close()
    state["pids"][name] = proc.pid
    save_state(run, state)
    return proc.pid


def _sinfo_states(run: Path) -> dict[str, str]:
    res = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %T"],
        capture_output=True,
        text=True,
        env=slurm_env(run),
        timeout=20,
    )
    if res.returncode != 0:
        return {}
    return dict(line.split() for line in res.stdout.splitlines() if line.strip())


def wait_idle(run: Path, nodes: list[str], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        pids = (read_state(run) or {}).get("pids", {})
        dead = [n for n, pid in pids.items() if not _ours(pid, run)]
        if dead:
            name = dead[0].replace("slurmd:", "slurmd-")
            raise ClusterError(f"{dead[0]} exited during start-up: {log_tail(run, name)}")
        states = _sinfo_states(run)
        if states and all(states.get(n, "").rstrip("*") == "idle" for n in nodes):
            return
        time.sleep(0.5)
    raise ClusterError(f"nodes not idle after {timeout:.0f}s: {states}; see {run}/log/")


def up(spec: ClusterSpec, run: Path, *, port_base_auto: bool = False) -> dict:
    """Start the cluster (or confirm it is up with this spec); returns its state."""
    run = run.resolve()
    rel = chroot.release(spec.slurm)
    if rel.in_chroot:
        chroot.ensure_chroot(rel)
    else:
        ensure_installed()
    if spec.accounting:
        accounting.ensure_installed(spec)
    old = read_state(run)
    if old and is_up(run):
        if port_base_auto:
            spec.port_base = old["spec"]["port_base"]
        if ClusterSpec(**old["spec"]) == spec:
            wait_idle(run, [n for n, _ in spec.node_names()])
            return old
        print("[local-cluster] configuration changed: restarting", file=sys.stderr)
    if old:
        down(run)
    if port_base_auto:
        spec.port_base = pick_port_base(len(spec.ports()))
    for port in spec.ports():
        if not port_free(port):
            raise ClusterError(
                f"TCP port {port} is taken (another Slurm daemon?); "
                f"pass --port-base N (needs {len(spec.ports())} free ports) or --port-base auto"
            )
    run.mkdir(parents=True, exist_ok=True)
    # Clean start: no stale nodes or jobs, and logs of this run only.
    for sub in ("state", "log", "bin", "db"):
        shutil.rmtree(run / sub, ignore_errors=True)
    write_config(spec, run)
    state: dict = {"spec": asdict(spec), "pids": {}, "munged": None}
    save_state(run, state)
    conf = str(run / "slurm.conf")
    try:
        if rel.in_chroot:
            _start_chroot_munge(rel, run, state)
            sbin = "/usr/sbin/"
        else:
            state["munged"] = ensure_munge()
            save_state(run, state)
            sbin = ""
        if spec.accounting:  # before slurmctld, which registers with slurmdbd
            accounting.start(
                spec, run, lambda n, argv, host: _start(run, state, n, argv, on_host=host)
            )
        _start(run, state, "slurmctld", [sbin + _exe("slurmctld", rel), "-D", "-f", conf])
        slurmd = sbin + _exe("slurmd", rel)
        for name, _ in spec.node_names():
            _start(run, state, f"slurmd:{name}", [slurmd, "-D", "-f", conf, "-N", name])
        wait_idle(run, [n for n, _ in spec.node_names()])
    except BaseException:
        down(run)
        raise
    return state


def _exe(name: str, rel: chroot.Release) -> str:
    return name if rel.in_chroot else which_sbin(name) or name


def _start_chroot_munge(rel: chroot.Release, run: Path, state: dict) -> None:
    """Mount the cluster's chroot view, write its bin dir, give a SlurmUser other than
    root its state and log folders, start the cluster's own munged."""
    if rel.slurm_user != "root":
        _check_reachable(run, rel)
    chroot.mount_view(rel, run)
    chroot.write_bin(rel, run)
    if rel.slurm_user != "root":
        uid, gid = chroot.user_ids(rel, rel.slurm_user)
        for sub in ("state", "log", "refused"):  # refused: job_submit.lua's REFUSALS_DIR
            os.chown(run / sub, uid, gid)
    sock = chroot.prepare_munge(run)
    _start(run, state, "munged", chroot.munged_argv(run))
    deadline = time.monotonic() + 10
    while not sock.exists():
        if time.monotonic() > deadline or not _ours(state["pids"]["munged"], run):
            raise ClusterError(f"munged did not open {sock}: {log_tail(run, 'munged')}")
        time.sleep(0.1)


def _check_reachable(run: Path, rel: chroot.Release) -> None:
    """slurmctld running as a plain user must reach the run dir (its conf, state, log)."""
    for folder in [run, *run.parents]:
        if not folder.stat().st_mode & 0o001:
            raise ClusterError(
                f"Slurm {rel.name}'s slurmctld runs as user {rel.slurm_user}, which cannot "
                f"enter {folder} (mode {folder.stat().st_mode & 0o777:o}): "
                f"chmod o+x {folder}, or choose a --dir it can reach"
            )


def _cancel_all_jobs(run: Path) -> None:
    """Jobs' processes outlive slurmd (proctrack/linuxproc): cancel them first."""
    env = slurm_env(run)
    res = subprocess.run(
        ["squeue", "-h", "-o", "%i"], capture_output=True, text=True, env=env, timeout=20
    )
    ids = res.stdout.split() if res.returncode == 0 else []
    if not ids:
        return
    subprocess.run(["scancel", *ids], capture_output=True, env=env, timeout=20)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        res = subprocess.run(
            ["squeue", "-h", "-t", "running,completing", "-o", "%i"],
            capture_output=True,
            text=True,
            env=env,
            timeout=20,
        )
        if res.returncode != 0 or not res.stdout.strip():
            return
        time.sleep(0.3)


def down(run: Path, *, stop_munge: bool = False) -> None:
    """Stop every daemon this cluster started, by pid, and for a chroot release
    whatever else still runs in its view (a slurmstepd left behind, a job), then
    unmount the view. Fine when already down."""
    run = run.resolve()
    state = read_state(run)
    if not state:
        chroot.unmount_view(run)  # a cluster killed half-way through `up`
        return
    pids = state.get("pids", {})
    if "slurmctld" in pids and _ours(pids["slurmctld"], run):
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            _cancel_all_jobs(run)
    # slurmds and slurmrestd first; slurmctld before slurmdbd (it sends it the last
    # job records), slurmdbd before its database; munge for them all.
    last = ("slurmctld", "slurmdbd", "mariadbd", "munged")
    terminate([pid for n, pid in pids.items() if n not in last], run)
    for name in last:
        if name in pids:
            terminate([pids[name]], run)
    if _release(state).in_chroot:
        leftover = chroot.pids_inside(run)
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while leftover and time.monotonic() < deadline:
            leftover = [p for p in leftover if _alive(p)]
            time.sleep(0.1)
        chroot.unmount_view(run)
    munged = state.get("munged")
    if stop_munge and munged and _alive(munged):
        os.kill(munged, signal.SIGTERM)
    (run / STATE_FILE).unlink(missing_ok=True)


def status(run: Path) -> str:
    run = run.resolve()
    state = read_state(run)
    if not state:
        return f"down (no cluster in {run})"
    alive = running_daemons(run)
    rel = _release(state)
    where = f"chroot {chroot.view(run)}" if rel.in_chroot else "host packages"
    lines = [
        f"{'up' if is_up(run) else 'DEGRADED'}: {run} (SLURM_CONF={run}/slurm.conf, "
        f"Slurm {rel.name} from the {where})"
    ]
    for name, pid in state["pids"].items():
        lines.append(f"  {name:20s} pid {pid:<8d} {'running' if name in alive else 'DEAD'}")
    for node, st in _sinfo_states(run).items():
        lines.append(f"  node {node:15s} {st}")
    return "\n".join(lines)


def env_lines(run: Path) -> str:
    """What `tools/local-cluster env` prints, for `eval`."""
    lines = [f"export SLURM_CONF={run}/slurm.conf"]
    if (run / "bin").is_dir():
        lines.append(f'export PATH="{run}/bin:$PATH"')
    return "\n".join(lines)


class _StopRequested(Exception):
    """SIGTERM arrived in foreground mode (docker stop)."""


def _raise_stop(signum: int, frame: object) -> None:
    raise _StopRequested


def stay_up(run: Path, poll_seconds: float = 2.0) -> int:
    """`up --foreground`: the main process of a container. Watch the cluster, stop it on
    SIGTERM or Ctrl-C (exit 0); when one of its daemons dies, stop the rest and exit 1, so
    that a container restart policy sees a failure instead of a clean exit."""
    previous = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        while is_up(run):
            time.sleep(poll_seconds)
        pids = (read_state(run) or {}).get("pids", {})
        dead = sorted(set(pids) - set(running_daemons(run))) or ["the cluster state"]
        print(f"local-cluster: {', '.join(dead)} exited; stopping the cluster", file=sys.stderr)
        return 1
    except (_StopRequested, KeyboardInterrupt):
        return 0
    finally:
        # A second SIGTERM must not cut `down` short and leave slurmds behind.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            down(run)
        finally:
            signal.signal(signal.SIGTERM, previous)
