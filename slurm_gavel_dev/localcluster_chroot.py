"""Newer Slurm releases for the local cluster: a Debian chroot per release.

The host (Debian 12) ships Slurm 22.05. Debian trixie ships 24.11 and sid 26.05, so
those two run from a chroot that mmdebstrap builds on first use (about 20 s) into
``/var/cache/slurm-gavel/chroot/<release>`` (``SLURM_GAVEL_CHROOT_CACHE`` moves it).
A build goes to a temporary folder renamed into place only when complete, under a
lock, so a killed build is never taken for a good one and two test runs never build
the same release at once.

Each cluster enters the chroot through its own view of it (under /run, linked from
``RUN/root``): a private bind mount of the cached tree with proc, sys, dev, /tmp, the
repository (read only) and the run dir mounted at the same paths as on the host, so
a job script or ``-o`` path means the same inside and out, and two clusters of one
release never share a mount.
Standard library only (the docker images run tools/local-cluster without a venv).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from slurm_gavel_dev.localcluster_conf import (
    HOST_RELEASE,
    RELEASES,
    REPO,
    ClusterError,
    Release,
    release,
)

# The release table lives with the configuration; callers find it here too.
__all__ = ["HOST_RELEASE", "RELEASES", "Release", "ensure_chroot", "mount_view", "release"]
__all__ += ["munged_argv", "pids_inside", "prepare_munge", "unmount_view", "view", "write_bin"]
__all__ += ["CACHE", "MARKER", "build_lock", "chroot_path", "user_ids"]

VIEWS = Path("/run/slurm-gavel/view")
# Written last into a finished build (the rename makes it visible); the bin dir's
# wrappers also look for it to tell that they already run inside (in a job script).
MARKER = ".slurm-gavel-chroot"
CACHE = Path(os.environ.get("SLURM_GAVEL_CHROOT_CACHE", "/var/cache/slurm-gavel/chroot"))
# What jobs and tests run inside: Slurm itself, munge, the SPANK headers (the plugin is
# compiled on the host against them), python3 for job scripts (slurm_gavel.job is
# stdlib only), ps/pgrep, curl for slurmrestd by hand.
PACKAGES = (
    "slurmctld,slurmd,slurm-client,slurmrestd,slurm-wlm-basic-plugins,munge,libslurm-dev,"
    "procps,python3,curl,ca-certificates,slurmdbd"
)
# Client commands the bin dir wraps (every one that exists in the chroot). Not munge:
# the cluster's munged listens on its own socket (RUN/munge), which Slurm finds
# through AuthInfo; `munge -S RUN/munge/munge.socket` tests it by hand.
CLIENTS = (
    "sinfo", "squeue", "scontrol", "sbatch", "scancel", "srun", "salloc", "sacct", "sattach",
    "sbcast", "sdiag", "sprio", "sreport", "sshare", "sstat", "strigger", "scrontab",
    "sacctmgr",
)  # fmt: skip


def chroot_path(rel: Release) -> Path:
    return CACHE / rel.name


def _mirror() -> str:
    """The Debian mirror the host's apt already uses (only registries are reachable)."""
    for src in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        with contextlib.suppress(OSError):
            for line in src.read_text().splitlines():
                words = line.split()
                if words[:1] == ["URIs:"] and len(words) > 1:
                    return words[1]
                if words[:1] == ["deb"] and len(words) > 2 and "security" not in words[-2]:
                    return words[2] if words[1].startswith("[") else words[1]
    return "http://deb.debian.org/debian"


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def build_lock(rel: Release) -> contextlib.AbstractContextManager[None]:
    """The lock held while the release's cached chroot is built or changed."""
    return _lock(CACHE / f".{rel.name}.lock")


def ensure_chroot(rel: Release) -> Path:
    """The release's chroot, built (atomically, under a lock) on first use."""
    root = chroot_path(rel)
    if (root / MARKER).exists():
        return root
    if os.geteuid() != 0:
        raise ClusterError(f"Slurm {rel.name} runs in a chroot that only root can build: {root}")
    with build_lock(rel):
        if (root / MARKER).exists():  # another process built it
            return root
        _build(rel, root)
    return root


def _build(rel: Release, root: Path) -> None:
    mmdebstrap = shutil.which("mmdebstrap")
    if not mmdebstrap:
        raise ClusterError("mmdebstrap is not installed: run tools/setup (as root)")
    tmp = root.with_name(f".{rel.name}.build-{os.getpid()}")
    for old in root.parent.glob(f".{rel.name}.build-*"):  # left by a killed build
        shutil.rmtree(old, ignore_errors=True)
    if root.exists():  # incomplete and not ours to trust
        shutil.rmtree(root)
    argv = [mmdebstrap, "--mode=root", "--variant=apt", f"--include={PACKAGES}", "--quiet"]
    argv += [f"--aptopt={opt}" for opt in rel.apt_options]
    argv += [str(rel.suite), str(tmp), f"deb {_mirror()} {rel.suite} main"]
    print(f"[local-cluster] building the Slurm {rel.name} chroot in {root}", file=sys.stderr)
    started = time.monotonic()
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterError(
            f"mmdebstrap {rel.suite} failed ({res.returncode}): {res.stderr.strip()[-1500:]}"
        )
    got = _version(tmp)
    if not got.startswith(rel.name + "."):
        shutil.rmtree(tmp, ignore_errors=True)
        raise ClusterError(f"the {rel.suite} chroot has Slurm {got}, not {rel.name}")
    # Nothing inside resolves names but localhost (the nodes' NodeAddr is 127.0.0.1).
    (tmp / "etc" / "hosts").write_text(f"127.0.0.1 localhost {os.uname().nodename.split('.')[0]}\n")
    (tmp / MARKER).write_text(f"{got}\n")
    tmp.rename(root)
    print(
        f"[local-cluster] Slurm {got} chroot ready in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )


def _version(root: Path) -> str:
    res = subprocess.run(
        ["chroot", str(root), "/usr/sbin/slurmctld", "-V"], capture_output=True, text=True
    )
    return res.stdout.split()[-1] if res.returncode == 0 and res.stdout.split() else "?"


def user_ids(rel: Release, name: str) -> tuple[int, int]:
    """uid and gid of a user of the release's chroot (its /etc/passwd)."""
    for line in (chroot_path(rel) / "etc" / "passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == name:
            return int(fields[2]), int(fields[3])
    raise ClusterError(f"no user {name} in the Slurm {rel.name} chroot")


# --- the per-cluster view --------------------------------------------------------------


def view(run: Path) -> Path:
    """Where the cluster's view of its chroot is mounted: under /run, never inside the
    run dir, so that no rm -rf of a run dir or of a test's tmp dir can walk through a
    view left mounted into /tmp or the chroot (RUN/root is only a link to it)."""
    return VIEWS / hashlib.sha1(str(run.resolve()).encode()).hexdigest()[:16]


def binds(run: Path) -> list[tuple[Path, bool]]:
    """Host paths seen at the same path inside, with whether they are writable: /tmp
    (test tmp dirs, job logs), the repository (job scripts, the SPANK plugin; read
    only) and the run dir. Outer paths first; one inside a writable one is skipped."""
    wanted = sorted(
        [(Path("/tmp"), True), (REPO, False), (run, True)], key=lambda b: len(b[0].parts)
    )
    out: list[tuple[Path, bool]] = []
    for path, writable in wanted:
        if not any(w and (path == q or q in path.parents) for q, w in out):
            out.append((path, writable))
    return out


def mount_view(rel: Release, run: Path) -> Path:
    """Mount the view: the cached chroot plus proc, sys, dev and the shared paths."""
    root = view(run)
    link = run / "root"
    if not link.is_symlink():
        link.unlink(missing_ok=True)
        link.symlink_to(root)
    if _mounted(root):
        return root
    cached = ensure_chroot(rel)
    root.mkdir(parents=True, exist_ok=True)
    _mount(["--bind", str(cached), str(root)])
    try:
        _mount(["--make-private", str(root)])
        _mount(["-t", "proc", "proc", str(root / "proc")])
        _mount(["-t", "sysfs", "sys", str(root / "sys")])
        _mount(["--bind", "/dev", str(root / "dev")])
        _mount(["--bind", "/dev/pts", str(root / "dev" / "pts")])
        for path, writable in binds(run):
            inside = root / path.relative_to("/")
            inside.mkdir(parents=True, exist_ok=True)  # in the cache: an empty mount point
            _mount(["--bind", str(path), str(inside)])
            if not writable:
                _mount(["-o", "remount,bind,ro", str(inside)])
    except BaseException:
        unmount_view(run)
        raise
    return root


def unmount_view(run: Path) -> None:
    """Unmount the view and everything below it (call after its processes are gone),
    then remove its empty mount point."""
    root = view(run)
    for _ in range(20):
        if not _mounted(root):
            break
        if subprocess.run(["umount", "-R", str(root)], capture_output=True).returncode == 0:
            break
        time.sleep(0.5)
    else:  # still busy (a process we did not start?): detach it
        subprocess.run(["umount", "-R", "-l", str(root)], capture_output=True)
    if not _mounted(root):
        with contextlib.suppress(OSError):
            root.rmdir()


def _mount(args: list[str]) -> None:
    res = subprocess.run(["mount", *args], capture_output=True, text=True)
    if res.returncode != 0:
        raise ClusterError(f"mount {' '.join(args)}: {res.stderr.strip()}")


def _mounted(path: Path) -> bool:
    target = str(path.resolve())
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            if line.split()[4].encode().decode("unicode_escape") == target:
                return True
    return False


def pids_inside(run: Path) -> list[int]:
    """Processes whose root is this cluster's view (daemons, leftover slurmstepd, jobs)."""
    target = str(view(run).resolve())
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(d / "root") == target:
                    found.append(int(d.name))
    return found


# --- what runs inside: munged, and the client commands' wrappers ---------------------


def munged_argv(run: Path) -> list[str]:
    """This cluster's own munged (key, socket, pid in RUN/munge): clusters never share
    one, and the host's munged is left alone. It runs as root (--force: the run dir
    belongs to root, not to the chroot's munge user)."""
    d = run / "munge"
    return [
        "/usr/sbin/munged", "-F", "--force", f"--socket={d}/munge.socket",
        f"--key-file={d}/munge.key", f"--pid-file={d}/munged.pid",
        f"--seed-file={d}/munged.seed", f"--log-file={run}/log/munged.log",
    ]  # fmt: skip


def prepare_munge(run: Path) -> Path:
    """RUN/munge with a fresh key (root only) and room for the socket every user
    reaches (mode 0755); returns the socket path."""
    d = run / "munge"
    d.mkdir(exist_ok=True)
    d.chmod(0o755)
    key = d / "munge.key"
    key.unlink(missing_ok=True)
    fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(1024))
    return d / "munge.socket"


WRAPPER = """#!/bin/sh
# Written by tools/local-cluster: Slurm {release}'s client command of this file's name,
# run inside the cluster's chroot view {root} as the caller, in the caller's
# working directory. Entering a chroot needs root: as root, SLURM_GAVEL_RUN_AS=USER
# runs the command as USER (e.g. to submit as a plain user).
name=${{0##*/}}
# Already inside (a job script calling scontrol): the real command.
[ -e /{marker} ] && exec "/usr/bin/$name" "$@"
if [ "$(id -u)" != 0 ]; then
  echo "$name: Slurm {release} of the local cluster runs in a chroot only root can enter;" \
       "run it as root (SLURM_GAVEL_RUN_AS=$(id -un) $name ... acts as you)" >&2
  exit 126
fi
spec=
if [ -n "${{SLURM_GAVEL_RUN_AS:-}}" ]; then
  uid=$(id -u "$SLURM_GAVEL_RUN_AS") && gid=$(id -g "$SLURM_GAVEL_RUN_AS") || exit 126
  spec="--userspec=$uid:$gid"
fi
exec chroot $spec {root} /bin/sh -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' \
  sh "$PWD" "/usr/bin/$name" "$@"
"""


def write_bin(rel: Release, run: Path) -> Path:
    """RUN/bin: one wrapper per client command the release has, for the front of PATH
    (`tools/local-cluster env`, the tests' LocalSlurm, slurm_env)."""
    root = view(run)
    cached = chroot_path(rel)
    bin_dir = run / "bin"
    bin_dir.mkdir(exist_ok=True)
    text = WRAPPER.format(release=rel.name, root=root, marker=MARKER)
    for name in CLIENTS:
        if (cached / "usr" / "bin" / name).exists():
            path = bin_dir / name
            path.write_text(text)
            path.chmod(0o755)
    return bin_dir
