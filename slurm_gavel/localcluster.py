"""A real multi-node Slurm cluster on one machine, for tests and the demo.

`tools/local-cluster up|down|status|rest|env` runs this module. It writes a
slurm.conf/gres.conf for a topology such as ``v100:2x4,p100:2x4,k80:2x4`` (two
nodes of four GPUs per type; the GPUs are empty files, which slurmd accepts as
devices), starts munge if it is not running, one slurmctld and one ``slurmd -N``
per emulated node, and waits until every node is idle. Every daemon it starts
is recorded by pid in ``DIR/cluster.json`` and stopped by that pid on ``down``.

Standard library only, on purpose: the same module is the entrypoint of the
docker images, which have no virtual environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from slurm_gavel.localcluster_conf import (
    DEFAULT_PORT_BASE,
    DEFAULT_TOPOLOGY,
    REPO,
    SHARED_PARTITION,
    ClusterError,
    ClusterSpec,
    parse_topology,
    write_config,
)
from slurm_gavel.localcluster_host import (
    ensure_installed,
    ensure_munge,
    pick_port_base,
    port_free,
    which_sbin,
)

DEFAULT_DIR = REPO / "run" / "cluster"
STATE_FILE = "cluster.json"


def slurm_env(run: Path) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": str(run / "slurm.conf")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# --- lifecycle -----------------------------------------------------------------------


def read_state(run: Path) -> dict | None:
    path = run / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def _save_state(run: Path, state: dict) -> None:
    tmp = run / (STATE_FILE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(run / STATE_FILE)


def _ours(pid: int, run: Path) -> bool:
    """The pid still runs a daemon of this cluster (not a recycled pid).

    A child this process spawned counts too: between fork and exec its command line
    is still this process's, without the run dir, and checking it then reported a
    slurmd that was only starting as "exited during start-up: (no log)" (seen in CI
    for the last node started, under load)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return False
    if not _alive(pid):
        return False
    return str(run) in cmd or _parent(pid) == os.getpid()


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # fields after "(comm)": state, ppid


def running_daemons(run: Path) -> dict[str, int]:
    state = read_state(run) or {}
    return {name: pid for name, pid in state.get("pids", {}).items() if _ours(pid, run)}


def is_up(run: Path) -> bool:
    state = read_state(run)
    if not state:
        return False
    alive = running_daemons(run)
    needed = [n for n in state.get("pids", {}) if n == "slurmctld" or n.startswith("slurmd:")]
    return all(name in alive for name in needed) and "slurmctld" in alive


def _start(run: Path, state: dict, name: str, argv: list[str]) -> int:
    out = open(run / "log" / f"{name.replace(':', '-')}.out", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        argv,
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        env=slurm_env(run),
    )
    out.close()
    state["pids"][name] = proc.pid
    _save_state(run, state)
    return proc.pid


def _log_tail(run: Path, name: str, lines: int = 5) -> str:
    for path in (run / "log" / f"{name}.log", run / "log" / f"{name}.out"):
        if path.exists() and path.stat().st_size:
            return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    return "(no log)"


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
            raise ClusterError(f"{dead[0]} exited during start-up: {_log_tail(run, name)}")
        states = _sinfo_states(run)
        if states and all(states.get(n, "").rstrip("*") == "idle" for n in nodes):
            return
        time.sleep(0.5)
    raise ClusterError(f"nodes not idle after {timeout:.0f}s: {states}; see {run}/log/")


def up(spec: ClusterSpec, run: Path, *, port_base_auto: bool = False) -> dict:
    """Start the cluster (or confirm it is up with this spec); returns its state."""
    run = run.resolve()
    ensure_installed()
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
    shutil.rmtree(run / "state", ignore_errors=True)
    shutil.rmtree(run / "log", ignore_errors=True)
    write_config(spec, run)
    state: dict = {"spec": asdict(spec), "pids": {}, "munged": ensure_munge()}
    _save_state(run, state)
    conf = str(run / "slurm.conf")
    try:
        _start(run, state, "slurmctld", [which_sbin("slurmctld") or "slurmctld", "-D", "-f", conf])
        slurmd = which_sbin("slurmd") or "slurmd"
        for name, _ in spec.node_names():
            _start(run, state, f"slurmd:{name}", [slurmd, "-D", "-f", conf, "-N", name])
        wait_idle(run, [n for n, _ in spec.node_names()])
    except BaseException:
        down(run)
        raise
    return state


def _terminate(pids: list[int], run: Path, timeout: float = 10.0) -> None:
    for pid in pids:
        if _ours(pid, run):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_ours(p, run) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if _ours(pid, run):
            os.kill(pid, signal.SIGKILL)


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
    """Stop every daemon this cluster started, by pid. Fine when already down."""
    run = run.resolve()
    state = read_state(run)
    if not state:
        return
    pids = state.get("pids", {})
    if "slurmctld" in pids and _ours(pids["slurmctld"], run):
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            _cancel_all_jobs(run)
    order = sorted(pids, key=lambda n: n == "slurmctld")  # slurmctld last
    _terminate([pids[n] for n in order if n != "slurmctld"], run)
    if "slurmctld" in pids:
        _terminate([pids["slurmctld"]], run)
    munged = state.get("munged")
    if stop_munge and munged and _alive(munged):
        os.kill(munged, signal.SIGTERM)
    (run / STATE_FILE).unlink(missing_ok=True)


def rest_up(run: Path) -> Path:
    """Start slurmrestd on DIR/slurmrestd.sock (rest_auth/local); returns the socket."""
    run = run.resolve()
    state = read_state(run)
    if not state or not is_up(run):
        raise ClusterError(f"no cluster is up in {run}; run `tools/local-cluster up` first")
    sock = run / "slurmrestd.sock"
    if "slurmrestd" in running_daemons(run) and sock.exists():
        return sock
    sock.unlink(missing_ok=True)
    state["pids"].pop("slurmrestd", None)
    exe = which_sbin("slurmrestd")
    if not exe:
        raise ClusterError("slurmrestd is not installed; run tools/setup (as root)")
    # slurmrestd refuses to run as root or SlurmUser unless told this is deliberate;
    # the socket is only reachable by root here (mode 0700 run dir).
    env_note = "SLURMRESTD_SECURITY=disable_user_check"
    os.environ.setdefault(*env_note.split("="))
    # Only the slurmctld plugins: the accounting ones (openapi/dbv*) are fatal without
    # slurmdbd, which the local cluster does not run.
    plugins = _rest_plugins(exe, run)
    _start(
        run,
        state,
        "slurmrestd",
        [
            exe,
            "-f",
            str(run / "slurm.conf"),
            "-a",
            "rest_auth/local",
            "-s",
            plugins,
            f"unix:{sock}",
        ],
    )
    for _ in range(100):
        if sock.exists():
            return sock
        if not _ours(state["pids"]["slurmrestd"], run):
            break
        time.sleep(0.1)
    raise ClusterError(f"slurmrestd did not open {sock}: {_log_tail(run, 'slurmrestd')}")


def _rest_plugins(exe: str, run: Path) -> str:
    res = subprocess.run(
        [exe, "-s", "list"], capture_output=True, text=True, env=slurm_env(run), timeout=20
    )
    names = [
        w for w in (res.stdout + res.stderr).split() if w.startswith("openapi/") and "/db" not in w
    ]
    if not names:
        raise ClusterError(f"slurmrestd -s list named no openapi plugin: {res.stderr.strip()}")
    return ",".join(names)


def status(run: Path) -> str:
    run = run.resolve()
    state = read_state(run)
    if not state:
        return f"down (no cluster in {run})"
    alive = running_daemons(run)
    lines = [f"{'up' if is_up(run) else 'DEGRADED'}: {run} (SLURM_CONF={run}/slurm.conf)"]
    for name, pid in state["pids"].items():
        lines.append(f"  {name:20s} pid {pid:<8d} {'running' if name in alive else 'DEAD'}")
    for node, st in _sinfo_states(run).items():
        lines.append(f"  node {node:15s} {st}")
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


# --- command line --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/local-cluster", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=["up", "down", "status", "rest", "env"])
    p.add_argument(
        "--topology",
        default=DEFAULT_TOPOLOGY,
        help=f"TYPE:NODESxGPUS,... (default {DEFAULT_TOPOLOGY})",
    )
    p.add_argument(
        "--partitions",
        default="both",
        choices=["per-type", "shared", "both"],
        help=f"one partition per GPU type, one shared '{SHARED_PARTITION}', or both",
    )
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help=f"run dir (default {DEFAULT_DIR})")
    p.add_argument(
        "--port-base",
        default=str(DEFAULT_PORT_BASE),
        help="slurmctld port; slurmds use the next ones; 'auto' picks free ports",
    )
    p.add_argument(
        "--spank",
        action="append",
        default=[],
        metavar="PLUGIN.so",
        help="load a SPANK plugin (optional); PLUGIN.so:required makes it required",
    )
    p.add_argument(
        "--no-hold",
        action="store_true",
        help="do not install job_submit.lua (managed jobs are then not held)",
    )
    p.add_argument("--rest", action="store_true", help="with up: also start slurmrestd")
    p.add_argument(
        "--foreground",
        action="store_true",
        help="with up: stay in the foreground and stop the cluster on SIGTERM",
    )
    p.add_argument(
        "--munge",
        action="store_true",
        help="with down: also stop munged if this cluster started it (other clusters may share it)",
    )
    return p


def _spank_lines(args: list[str]) -> list[str]:
    lines = []
    for item in args:
        path, _, kind = item.partition(":")
        kind = kind or "optional"
        if kind not in ("optional", "required"):
            raise ClusterError(f"--spank {item}: the suffix must be :optional or :required")
        if not Path(path).is_file():
            raise ClusterError(f"--spank {path}: no such file (build the plugin first)")
        lines.append(f"{kind} {Path(path).resolve()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    run: Path = args.dir.resolve()
    try:
        if args.command == "up":
            auto = args.port_base == "auto"
            spec = ClusterSpec(
                topology=args.topology,
                partitions=args.partitions,
                port_base=DEFAULT_PORT_BASE if auto else int(args.port_base),
                spank=_spank_lines(args.spank),
                hold_on_arrival=not args.no_hold,
            )
            parse_topology(spec.topology)
            up(spec, run, port_base_auto=auto)
            if args.rest:
                print(f"slurmrestd: unix:{rest_up(run)}")
            print(status(run))
            print(f"export SLURM_CONF={run}/slurm.conf")
            if args.foreground:
                return stay_up(run)
        elif args.command == "down":
            down(run, stop_munge=args.munge)
            print(f"down: {run}")
        elif args.command == "rest":
            print(f"slurmrestd: unix:{rest_up(run)}")
        elif args.command == "env":
            print(f"export SLURM_CONF={run}/slurm.conf")
        else:
            print(status(run))
            return 0 if is_up(run) else 1
    except (ClusterError, subprocess.CalledProcessError) as e:
        print(f"local-cluster: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
