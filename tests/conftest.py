"""Root conftest: the real local Slurm cluster for tests marked ``@pytest.mark.slurm``.

The cluster (tools/local-cluster: one slurmctld, one slurmd per emulated GPU node)
starts on free ports in a private run dir the first time a test asks for the
``slurm`` fixture, and is stopped (by pid) when done. It runs once per Slurm
release: 22.05 (the host's packages), 24.11 and 26.05 (chroots, see
slurm_gavel_dev/localcluster_chroot.py), so every test using it runs on each, one
release after the other (pytest groups the tests by the session fixture's param).

* ``SLURM_GAVEL_SLURM=24.11`` (or ``22.05,26.05``) narrows the releases; default all.
* ``SLURM_GAVEL_TEST_CLUSTER=DIR`` reuses a cluster already started in DIR with the
  default topology (``tools/local-cluster up --dir DIR``); it is left running.
* ``SLURM_GAVEL_TEST_SPANK=/path/plugin.so`` loads a SPANK plugin into the cluster;
  the repository's own (spank/build/slurm-gavel.so) is rebuilt against each chroot
  release's headers (spank/build/<release>/).
* Without Slurm installed the slurm tests are skipped, unless
  ``SLURM_GAVEL_REQUIRE_SLURM=1`` (tools/test, CI) makes every skip of a slurm test
  a failure (tests/slurm_required.py).
* Tests marked ``torch`` run on 22.05 only: their jobs run the repository's .venv
  (PyTorch), whose interpreter is the host's and does not exist in a chroot. For the
  same reason the demo (tests/tools/test_demo.py, which starts its own cluster and trains
  real models for minutes) stays on the host's release; jobs of the other Slurm
  tests are bash, or python3 with the standard library (slurm_gavel.job), which the
  chroots have.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from build_lock import build_lock
from daemon_records import daemon_records
from own_cluster import own_cluster
from run_parts import in_this_part, rotated, worker_ports
from slurm_required import pytest_runtest_makereport, required

from slurm_gavel_dev import localcluster
from slurm_gavel_dev import localcluster_chroot as chroot
from slurm_gavel_dev.localcluster_conf import ClusterSpec

__all__ = ["pytest_runtest_makereport"]  # the hook, imported to be found here
# The hostile-input figure printed at the end of every run.
pytest_plugins = ["hostile_summary"]
REPO = Path(__file__).resolve().parent.parent
OUR_PLUGIN = REPO / "spank" / "build" / "slurm-gavel.so"
# The accounting cluster is small (3 nodes, 6 GPUs): its tests oversubscribe it with
# a few jobs, and it runs beside the main cluster.
ACCOUNTING_TOPOLOGY = "v100:1x2,p100:1x2,k80:1x2"


def slurm_releases() -> list[str]:
    """The releases this run tests: SLURM_GAVEL_SLURM, else all of them."""
    reuse = os.environ.get("SLURM_GAVEL_TEST_CLUSTER")
    if reuse:
        state = localcluster.read_state(Path(reuse).resolve()) or {}
        return [state.get("spec", {}).get("slurm", chroot.HOST_RELEASE)]
    text = os.environ.get("SLURM_GAVEL_SLURM", "")
    names = [n.strip() for n in text.split(",") if n.strip()] or list(chroot.RELEASES)
    unknown = [n for n in names if n not in chroot.RELEASES]
    if unknown:
        raise pytest.UsageError(
            f"SLURM_GAVEL_SLURM={text}: unknown release {', '.join(unknown)}; "
            f"choose from {', '.join(chroot.RELEASES)}"
        )
    return names


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "slurm_release(*names): run on these Slurm releases only (slurm fixture)"
    )
    worker_ports()


# The session fixtures parametrized by release (a test module may add its own cluster).
RELEASE_FIXTURES = ("slurm_session", "slurm_accounting_session", "slurm_shards_session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out (not skip: CI fails on skips) the release a test does not run on."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec else {}
        release = next((params[k] for k in RELEASE_FIXTURES if k in params), None)
        only = item.get_closest_marker("slurm_release")
        wanted = set(only.args) if only else set(chroot.RELEASES)
        if item.get_closest_marker("torch"):
            wanted &= {chroot.HOST_RELEASE}  # see the module docstring
        if not in_this_part(release):
            drop.append(item)
            continue
        (drop if release is not None and release not in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if os.environ.get("SLURM_GAVEL_SLURM_ONLY") == "1" and len(slurm_releases()) == 1:
        # Each release's run begins at another third of its modules (run_parts.py);
        # a module's tests stay together and in their order.
        by_module: dict[str, list[pytest.Item]] = {}
        for item in items:
            by_module.setdefault(item.nodeid.split("::")[0], []).append(item)
        index = list(chroot.RELEASES).index(slurm_releases()[0])
        order = rotated(list(by_module), index, len(chroot.RELEASES))
        items[:] = [item for module in order for item in by_module[module]]


@pytest.fixture(autouse=True)
def _package_logger_reset() -> Iterator[None]:
    """Undo what a test's `logs.configure` (any CLI call) did to the slurm_gavel logger:
    it stops propagation to the root logger, where caplog listens, so a later test's
    log assertions failed depending on the order the tests ran in."""
    yield
    pkg = logging.getLogger("slurm_gavel")
    for handler in list(pkg.handlers):
        pkg.removeHandler(handler)
    pkg.propagate = True
    pkg.setLevel(logging.NOTSET)


@pytest.fixture
def daemon_log() -> Iterator[list[logging.LogRecord]]:
    """Records of the daemon's logger, every level (the CLI's set-up, run by other tests
    in the same process, stops propagation to the root logger, where caplog listens)."""
    with daemon_records() as records:
        yield records


@dataclass
class LocalSlurm:
    """A running local cluster and small helpers for tests."""

    run_dir: Path
    spec: ClusterSpec

    @property
    def release(self) -> str:
        return self.spec.slurm

    @property
    def env(self) -> dict[str, str]:
        """SLURM_CONF, and for a chroot release its wrappers first on PATH."""
        env = {"SLURM_CONF": str(self.run_dir / "slurm.conf")}
        if (self.run_dir / "bin").is_dir():
            env["PATH"] = f"{self.run_dir / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}"
        return env

    def as_user(self, user: str, *argv: str) -> subprocess.CompletedProcess[str]:
        """A client command as a plain user (root runs the tests): runuser on the
        host's release; in a chroot (only root enters it) the wrapper switches."""
        if chroot.release(self.release).in_chroot:
            env = {**os.environ, **self.env, "SLURM_GAVEL_RUN_AS": user}
            cmd = list(argv)
        else:
            env = {**os.environ, **self.env}
            cmd = ["runuser", "-u", user, "--", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)

    def cmd(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # surrogateescape: squeue prints other tests' hostile comments (invalid UTF-8)
        return subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="surrogateescape",
            check=check,
            env={**os.environ, **self.env},
            timeout=60,
        )

    def sbatch(self, *args: str) -> str:
        """Submit; returns the job id."""
        out = self.cmd("sbatch", "--parsable", *args).stdout.strip()
        return out.split(";")[0]

    def sbatch_as(self, user: str, *args: str) -> str:
        """Submit as a plain user to the gpu partition, from /tmp and with the output
        discarded (the user cannot write the test's folders); returns the job id."""
        res = self.as_user(
            user, "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null", "-p", "gpu", *args
        )
        assert res.returncode == 0, res.stderr
        return res.stdout.strip().split(";")[0]

    def sbatch_ignoring_the_signal(self) -> str:
        """A managed A3C job whose script ignores the checkpoint signal (SIGUSR1): what
        the requeue-hold after the grace period is for."""
        return self.sbatch(
            "--comment=gavel:type=A3C", "-p", "gpu", "-o", "/dev/null",
            "--wrap", "trap '' USR1; sleep 300",
        )  # fmt: skip

    def state(self, job_id: str) -> str:
        res = self.cmd("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T", check=False)
        return res.stdout.strip() or "GONE"

    def show(self, job_id: str) -> dict[str, str]:
        """scontrol show job as key -> value (first occurrence)."""
        out = self.cmd("scontrol", "show", "job", "--oneliner", job_id).stdout
        fields: dict[str, str] = {}
        for tok in out.split():
            k, _, v = tok.partition("=")
            fields.setdefault(k, v)
        return fields

    def wait_state(self, job_id: str, *states: str, timeout: float = 30.0) -> str:
        deadline = time.monotonic() + timeout
        st = ""
        while time.monotonic() < deadline:
            st = self.state(job_id)
            if st in states:
                return st
            time.sleep(0.2)
        # Say why (Reason, ExitCode, node): a flaky CI failure must be diagnosable.
        raise AssertionError(
            f"job {job_id} is {st}, not {states} after {timeout}s ({self.why(job_id)})"
            f"\n{self.log_lines(job_id)}"
        )

    def why(self, job_id: str) -> str:
        """The scontrol fields that say how a job ended or why it waits."""
        info = self.cmd("scontrol", "show", "job", "--oneliner", job_id, check=False)
        keep = ("JobState", "Reason", "ExitCode", "Restarts", "NodeList", "BatchHost",
                "RunTime", "Requeue", "Comment")  # fmt: skip
        return " ".join(t for t in info.stdout.split() if t.split("=")[0] in keep)

    def log_lines(self, job_id: str, limit: int = 30) -> str:
        """The daemons' log lines about one job (slurmctld's and every slurmd's)."""
        pattern = re.compile(rf"(JobId={job_id}|job {job_id}|\[{job_id}\.|JOB {job_id})\b")
        lines = []
        for log in sorted((self.run_dir / "log").glob("*.log")):
            lines += [
                f"{log.stem}: {line}"
                for line in log.read_text(errors="replace").splitlines()
                if pattern.search(line)
            ]
        return "\n".join(lines[-limit:]) or "(no log lines)"

    def cancel_all(self, wait_s: float = 60.0) -> list[str]:
        """Cancel every job and wait for the queue to empty; the jobs still there.

        The wait is long because a COMPLETING job still holds its GPUs: under a loaded
        CI machine (three releases' clusters at once) 26.05 took over 20 s to finish
        killing jobs, and the next test saw 8 GPUs it did not expect in use."""
        ids = self.cmd("squeue", "-h", "-o", "%i", check=False).stdout.split()
        if ids:
            self.cmd("scancel", *ids, check=False)
        deadline = time.monotonic() + wait_s
        left: list[str] = []
        while time.monotonic() < deadline:
            left = self.cmd(
                "squeue",
                "-h",
                "-t",
                "pending,running,completing,special_exit",
                "-o",
                "%i",
                check=False,
            ).stdout.split()
            if not left:
                break
            time.sleep(0.2)
        names = [n for n, _ in self.spec.node_names()]
        self.cmd("scontrol", "update", f"NodeName={','.join(names)}", "State=RESUME", check=False)
        if not left:
            # Every node idle again before the next test: a test that drained a node or
            # restarted a slurmd must not leave a smaller cluster to the next one.
            try:
                # At least a minute: a slurmd an earlier test stopped or restarted can
                # take that long to register again on a loaded CI machine (a test that
                # then found nodes missing waited "Reason=Resources" on 22.05).
                localcluster.wait_idle(
                    self.run_dir, names, timeout=max(60.0, deadline - time.monotonic())
                )
            except localcluster.ClusterError as e:
                left = [f"(no job left, but {e})"]
        if not left:
            left = self._gpus_counted_in_use(names, deadline)
        return left

    def clear_gpus_counted_after_a_restart(self) -> list[str]:
        """Slurm 22.05 counts twice the GPUs of a job that starts on a node in the
        seconds after a slurmctld restart, before that node registers again; when the
        job ends one count stays, and the node keeps GPUs "in use" that no job holds
        (reproduced without the daemon: jobs released before the controller stopped,
        started by Slurm after it came back; 26.05 does not). `scontrol reconfigure`
        rebuilds the counts from the jobs. With no job left, the nodes that counted
        GPUs in use before it (empty: none); the caller asserts the cluster is clean."""
        names = [n for n, _ in self.spec.node_names()]
        counted = self._gpus_counted_in_use(names, time.monotonic() + 10.0)
        if counted:
            self.cmd("scontrol", "reconfigure")
        return counted

    def _gpus_counted_in_use(self, names: list[str], deadline: float) -> list[str]:
        """Nodes that still count GPUs in use with no job on them (waited for until the
        deadline, at least 10 s): after a slurmctld restart, 22.05 (above)."""
        end = max(deadline, time.monotonic() + 10.0)
        busy: list[str] = []
        while True:
            busy = []
            for name, fields in self.nodes().items():
                used = fields.get("GresUsed", "")
                if name in names and re.search(r":[1-9]\d*(\(|,|$)", used):
                    busy.append(f"(no job left, but {name} GresUsed={used})")
            if not busy or time.monotonic() >= end:
                return busy
            time.sleep(0.5)

    def nodes(self) -> dict[str, dict[str, str]]:
        """scontrol show node as node name -> its fields (key -> value). With -d (the
        details): 22.05 prints GresUsed only then, and a check of it without -d saw
        every node idle."""
        out = self.cmd("scontrol", "-d", "show", "node", "--oneliner", check=False).stdout
        nodes = {}
        for line in out.splitlines():
            fields = dict(t.partition("=")[::2] for t in line.split())
            if "NodeName" in fields:
                nodes[fields["NodeName"]] = fields
        return nodes


def _slurm_installed() -> bool:
    return all(
        shutil.which(b) or Path("/usr/sbin", b).exists()
        for b in ("slurmctld", "slurmd", "sbatch", "munged")
    )


def _cannot_run(release: str) -> str | None:
    """Why this release cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root: run the Slurm tests as root (tools/setup installs Slurm)"
    if release == chroot.HOST_RELEASE:
        return None if _slurm_installed() else "Slurm not installed: run tools/setup as root"
    ready = (chroot.chroot_path(chroot.release(release)) / chroot.MARKER).exists()
    if not ready and not shutil.which("mmdebstrap"):
        return f"no Slurm {release} chroot and no mmdebstrap: run tools/setup as root"
    return None


def _spank_for(release: str, path: str) -> str:
    """The plugin to load: ours is rebuilt against the release's own spank.h."""
    plugin = Path(path).resolve()
    rel = chroot.release(release)
    if plugin != OUR_PLUGIN or not rel.in_chroot:
        return str(plugin)
    root = chroot.ensure_chroot(rel)
    build = f"build/{release}"
    with build_lock():
        res = subprocess.run(
            ["make", "-C", str(REPO / "spank"), f"SLURM_ROOT={root}", f"BUILD={build}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    if res.returncode != 0:
        pytest.fail(f"the SPANK plugin does not build against Slurm {release}: {res.stderr}")
    return str(REPO / "spank" / build / "slurm-gavel.so")


@contextlib.contextmanager
def _local_cluster(release: str, **spec_args: object) -> Iterator[LocalSlurm]:
    """A cluster of the release on free ports in a private run dir, stopped after."""
    reuse = os.environ.get("SLURM_GAVEL_TEST_CLUSTER")
    if reuse:
        run = Path(reuse).resolve()
        if not localcluster.is_up(run):
            pytest.fail(f"SLURM_GAVEL_TEST_CLUSTER={run}: no cluster is up there")
        spec = ClusterSpec(**localcluster.read_state(run)["spec"])
        if spec_args.get("accounting") and not spec.accounting:
            pytest.fail(f"SLURM_GAVEL_TEST_CLUSTER={run}: start it with up --accounting")
        yield LocalSlurm(run, spec)
        return
    why = _cannot_run(release)
    if why:
        if required():
            pytest.fail(f"Slurm {release} tests required (SLURM_GAVEL_REQUIRE_SLURM=1): {why}")
        pytest.skip(why)
    spank = os.environ.get("SLURM_GAVEL_TEST_SPANK")
    spec = ClusterSpec(
        spank=[f"optional {_spank_for(release, spank)}"] if spank else [],
        slurm=release,
        **spec_args,  # type: ignore[arg-type]
    )
    with own_cluster(spec, f"slurm-gavel-test-{release}-") as run:
        yield LocalSlurm(run, spec)


@pytest.fixture(scope="session", params=slurm_releases())
def slurm_session(request: pytest.FixtureRequest) -> Iterator[LocalSlurm]:
    with _local_cluster(request.param) as cluster:
        yield cluster


@pytest.fixture(scope="session", params=slurm_releases())
def slurm_accounting_session(request: pytest.FixtureRequest) -> Iterator[LocalSlurm]:
    """A second cluster with MariaDB and slurmdbd (up --accounting), for the tests that
    read sacct: the other tests keep the faster cluster without them."""
    with _local_cluster(request.param, accounting=True, topology=ACCOUNTING_TOPOLOGY) as cluster:
        yield cluster


@pytest.fixture(scope="session", params=slurm_releases())
def slurm_shards_session(request: pytest.FixtureRequest) -> Iterator[LocalSlurm]:
    """A small cluster with 2 gres/shard per GPU (up --shards 2), for the GPU-sharing
    tests: the other tests keep the cluster without shards."""
    with _local_cluster(request.param, shards=2, topology="v100:1x2,k80:1x2") as cluster:
        yield cluster


@pytest.fixture
def slurm_accounting(slurm_accounting_session: LocalSlurm) -> Iterator[LocalSlurm]:
    """The accounting cluster, with every job cancelled after the test."""
    slurm_accounting_session.cancel_all()
    yield slurm_accounting_session
    slurm_accounting_session.cancel_all()


@pytest.fixture
def slurm(slurm_session: LocalSlurm) -> Iterator[LocalSlurm]:
    """The session's cluster, with every job cancelled after the test (and before it:
    a cluster an earlier test could not clean up fails this one at once, saying why)."""
    left = slurm_session.cancel_all()
    if left:
        pytest.fail(f"the cluster is not clean before this test: {left}")
    yield slurm_session
    left = slurm_session.cancel_all()
    if left:
        # Named here, at the test that left it, not at the next test's set-up.
        pytest.fail(f"this test left the cluster unclean: {left}")
