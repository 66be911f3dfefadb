"""tools/local-cluster: generated configuration, and the real lifecycle (up twice,
status, down twice, port clash, SPANK plugin line, slurmrestd on a unix socket)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from slurm_gavel_dev import localcluster
from slurm_gavel_dev import localcluster_chroot as chroot
from slurm_gavel_dev.localcluster_conf import (
    ClusterError,
    ClusterSpec,
    gres_conf_text,
    parse_topology,
    slurm_conf_text,
)

REPO = Path(__file__).resolve().parents[2]
TOOL = str(REPO / "tools" / "local-cluster")


def test_topology_parsing_and_errors():
    groups = parse_topology("v100:2x4, k80:1x8")
    assert [(g.gpu_type, g.nodes, g.gpus_per_node) for g in groups] == [
        ("v100", 2, 4),
        ("k80", 1, 8),
    ]
    for bad, msg in [
        ("v100", "TYPE:NODESxGPUS"),
        ("v100:2", "TYPE:NODESxGPUS"),
        ("v100:0x4", "positive"),
        ("v100:1x1,v100:1x2", "twice"),
        ("a b:1x1", "plain type"),
    ]:
        with pytest.raises(ClusterError, match=msg):
            parse_topology(bad)


def test_slurm_conf_has_the_protocol_and_per_node_ports(tmp_path):
    spec = ClusterSpec(
        topology="v100:2x4,k80:1x2",
        partitions="both",
        port_base=20000,
        spank=["optional /x/plugin.so"],
    )
    conf = slurm_conf_text(spec, tmp_path)
    lines = conf.splitlines()
    for needed in (
        "JobRequeue=1",
        "RequeueExitHold=99",
        "SlurmdParameters=config_overrides",
        "GresTypes=gpu",
        "SlurmctldPort=20000",
        "JobSubmitPlugins=lua",
        f"PlugStackConfig={tmp_path}/plugstack.conf",
    ):
        assert needed in lines
    nodes = [ln for ln in lines if ln.startswith("NodeName=")]
    assert len(nodes) == 3
    assert "NodeName=k80-1 " in nodes[2] and "Port=20003" in nodes[2]
    assert "Gres=gpu:k80:2" in nodes[2]
    parts = [ln.split()[0] for ln in lines if ln.startswith("PartitionName=")]
    assert parts == ["PartitionName=gpu", "PartitionName=v100", "PartitionName=k80"]
    per_type = slurm_conf_text(ClusterSpec(topology="v100:1x1", partitions="per-type"), tmp_path)
    assert "PartitionName=v100 Nodes=v100-[1-1] Default=YES" in per_type
    assert "PartitionName=gpu" not in per_type
    gres = gres_conf_text(spec, tmp_path)
    assert f"NodeName=v100-2 Name=gpu Type=v100 File={tmp_path}/dev/v100-2/gpu[0-3]" in gres


def test_a_child_that_has_not_exec_d_slurmd_yet_counts_as_running(tmp_path):
    # Between fork and exec a spawned daemon's command line is still ours (no run dir
    # in it): it is starting, not exited.
    pid = os.fork()
    if pid == 0:  # the child: stays a copy of this process, never execs
        time.sleep(30)
        os._exit(0)
    try:
        assert localcluster._ours(pid, tmp_path)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    assert not localcluster._ours(pid, tmp_path)  # gone
    assert not localcluster._ours(1, tmp_path)  # alive, not ours, no run dir


def test_spank_option_needs_an_existing_file(tmp_path):
    res = subprocess.run(
        [TOOL, "up", "--dir", str(tmp_path), "--spank", "/nope/x.so"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 2
    assert "--spank /nope/x.so: no such file" in res.stderr


def _free_port_base(n: int) -> int:
    # Inside this run's own port range (tools/test gives each release's run 4000 ports
    # from SLURM_GAVEL_PORT_START): a fixed 23000 raced the other releases' runs.
    return localcluster.pick_port_base(
        n, start=int(os.environ.get("SLURM_GAVEL_PORT_START", "17000")) + 2000
    )


def _build_hello_plugin(tmp_path: Path, release: str) -> Path:
    """A SPANK plugin that logs one line, built against the release's own spank.h."""
    headers = Path("/usr/include/slurm")
    if chroot.release(release).in_chroot:
        headers = chroot.chroot_path(chroot.release(release)) / "usr" / "include" / "slurm"
    if not shutil.which("gcc") or not (headers / "spank.h").exists():
        pytest.skip(f"gcc or {headers}/spank.h missing: run tools/setup as root")
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "slurm").symlink_to(headers)  # only slurm/, not its libc
    plugin_c = tmp_path / "hello.c"
    plugin_c.write_text(
        "#include <slurm/spank.h>\nSPANK_PLUGIN(hello, 1);\n"
        "int slurm_spank_init(spank_t sp, int ac, char **av) {\n"
        '  if (spank_context() == S_CTX_REMOTE) slurm_info("hello-spank-loaded");\n'
        "  return 0;\n}\n"
    )
    so = tmp_path / "hello.so"
    cmd = ["gcc", "-shared", "-fPIC", "-I", str(tmp_path / "include"), "-o", str(so)]
    subprocess.run([*cmd, str(plugin_c)], check=True)
    return so


def _ping_path(sock: Path) -> str:
    """/slurm/vX/ping of the newest API version the server offers (22.05: v0.0.38)."""
    paths = _get_unix(sock, "/openapi/v3").get("paths", {})
    versions = sorted(
        (p.split("/")[2] for p in paths if p.startswith("/slurm/v") and p.endswith("/ping/")),
        key=lambda v: [int(x) for x in v[1:].split(".")],
    )
    return f"/slurm/{versions[-1]}/ping" if versions else "/slurm/v0.0.38/ping"


@pytest.mark.slurm
def test_lifecycle_idempotent_status_port_clash_and_spank(slurm_session, tmp_path):
    """A second, small cluster of the session's release beside the session's own: up
    twice, status, a SPANK plugin built here and loaded through --spank, slurmrestd,
    down twice (and for a chroot release: nothing left running in it or mounted)."""
    release = slurm_session.release
    so = _build_hello_plugin(tmp_path, release)
    # Not in tmp_path: 26.05's slurmctld runs as user slurm, and pytest's tmp dirs
    # are private to root (0700).
    run = Path(tempfile.mkdtemp(prefix="slurm-gavel-lifecycle-"))
    run.chmod(0o755)
    base = _free_port_base(3)
    args = [
        "--dir",
        str(run),
        "--topology",
        "a100:2x2",
        "--partitions",
        "per-type",
        "--port-base",
        str(base),
        "--spank",
        str(so),
        "--slurm",
        release,
    ]
    env = localcluster.slurm_env(run)
    try:
        up = subprocess.run([TOOL, "up", *args], capture_output=True, text=True, timeout=300)
        assert up.returncode == 0, up.stderr
        pids = localcluster.read_state(run)["pids"]
        daemons = {"slurmctld", "slurmd:a100-1", "slurmd:a100-2"}
        if chroot.release(release).in_chroot:
            daemons.add("munged")  # the cluster's own, in its chroot
            assert f'export PATH="{run}/bin:$PATH"' in up.stdout
        assert set(pids) == daemons
        again = subprocess.run([TOOL, "up", *args], capture_output=True, text=True, timeout=60)
        assert again.returncode == 0 and localcluster.read_state(run)["pids"] == pids
        st = subprocess.run([TOOL, "status", "--dir", str(run)], capture_output=True, text=True)
        assert st.returncode == 0 and "node a100-2" in st.stdout and "idle" in st.stdout
        assert f"Slurm {release}" in st.stdout
        assert f"optional {so}" in (run / "plugstack.conf").read_text()
        # The plugin runs in slurmstepd for a job (its log line lands in the node's log).
        env = localcluster.slurm_env(run)
        out = subprocess.run(
            ["srun", "-p", "a100", "-w", "a100-1", "true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "hello-spank-loaded" in (run / "log" / "slurmd-a100-1.log").read_text()
        version = subprocess.run(["sinfo", "-V"], env=env, capture_output=True, text=True)
        assert version.stdout.split()[-1].startswith(release + "."), version.stdout
        # A relative script and -o path from the caller's working directory: the same
        # paths inside the chroot (the job runs there) and out.
        (tmp_path / "job.sh").write_text("#!/bin/sh\npwd\n")
        job = subprocess.run(
            ["sbatch", "--parsable", "--wait", "-p", "a100", "-o", "job.out", "job.sh"],
            env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert job.returncode == 0, job.stderr
        assert (tmp_path / "job.out").read_text().strip() == str(tmp_path)
        if chroot.release(release).in_chroot:
            # Only root enters a chroot: a plain user is told how to run the command.
            plain = subprocess.run(
                ["runuser", "-u", "nobody", "--", str(run / "bin" / "sinfo")],
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert plain.returncode == 126 and "only root can enter" in plain.stderr
        # Another cluster on the same ports is refused with the fix in the message.
        clash = subprocess.run(
            [
                TOOL,
                "up",
                "--dir",
                str(tmp_path / "other"),
                "--topology",
                "k80:1x1",
                "--port-base",
                str(base),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert clash.returncode == 2 and f"TCP port {base} is taken" in clash.stderr
        # slurmrestd on a unix socket answers ping through rest_auth/local.
        rest = subprocess.run(
            [TOOL, "rest", "--dir", str(run)], capture_output=True, text=True, timeout=60
        )
        assert rest.returncode == 0, rest.stderr
        sock = run / "slurmrestd.sock"
        doc = _get_unix(sock, _ping_path(sock))
        ping = doc["pings"][0]  # 22.05: ping UP; 24.11: pinged UP; 26.05: responding
        assert ping.get("responding") is True or "UP" in (ping.get("ping"), ping.get("pinged"))
        stray = None
        if chroot.release(release).in_chroot:
            # A process in the chroot that no pid file names (as a slurmstepd left
            # behind would be): `down` finds it by its root and stops it.
            stray = subprocess.Popen(["chroot", str(chroot.view(run)), "sleep", "300"])
            time.sleep(0.5)
            assert stray.pid in chroot.pids_inside(run)
        down = subprocess.run(
            [TOOL, "down", "--dir", str(run)], capture_output=True, text=True, timeout=60
        )
        assert down.returncode == 0
        for pid in pids.values():
            assert not localcluster._alive(pid)
        if stray is not None:
            assert stray.wait(10) == -signal.SIGKILL
        assert not chroot.pids_inside(run)
        assert not chroot.view(run).exists()  # unmounted, mount point removed
        again = subprocess.run([TOOL, "down", "--dir", str(run)], capture_output=True, text=True)
        assert again.returncode == 0
        st = subprocess.run([TOOL, "status", "--dir", str(run)], capture_output=True, text=True)
        assert st.returncode == 1 and st.stdout.startswith("down")
    finally:
        subprocess.run([TOOL, "down", "--dir", str(run)], capture_output=True, timeout=60)
        shutil.rmtree(run, ignore_errors=True)  # safe: the view is mounted under /run


def test_a_plain_slurm_user_must_reach_the_run_dir(tmp_path):
    private = tmp_path / "private"
    (private / "run").mkdir(parents=True)
    private.chmod(0o700)
    with pytest.raises(ClusterError, match=f"cannot enter {private} .mode 700.: chmod o.x"):
        localcluster._check_reachable(private / "run", chroot.release("26.05"))


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path):
        super().__init__("localhost", timeout=10)
        self.unix_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def _get_unix(path: Path, url: str) -> dict:
    conn = _UnixHTTP(path)
    conn.request("GET", url)
    return json.loads(conn.getresponse().read())


def test_shards_add_a_shard_gres_per_fake_gpu(tmp_path):
    plain = ClusterSpec(topology="v100:1x4,k80:1x2", port_base=20000)
    assert "GresTypes=gpu" in slurm_conf_text(plain, tmp_path).splitlines()
    assert ",shard" not in slurm_conf_text(plain, tmp_path)
    assert "Name=shard" not in gres_conf_text(plain, tmp_path)
    spec = ClusterSpec(topology="v100:1x4,k80:1x2", port_base=20000, shards=2)
    conf = slurm_conf_text(spec, tmp_path).splitlines()
    assert "GresTypes=gpu,shard" in conf
    nodes = [ln for ln in conf if ln.startswith("NodeName=")]
    assert "Gres=gpu:v100:4,shard:8 " in nodes[0] and "Gres=gpu:k80:2,shard:4 " in nodes[1]
    gres = gres_conf_text(spec, tmp_path).splitlines()
    assert "NodeName=v100-1 Name=shard Count=8" in gres
    assert "NodeName=k80-1 Name=shard Count=4" in gres
    with pytest.raises(ClusterError, match="--shards -1"):
        slurm_conf_text(ClusterSpec(topology="v100:1x1", shards=-1), tmp_path)
