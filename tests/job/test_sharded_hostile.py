"""Sharded (torch.distributed.checkpoint) checkpoint directories as hostile input.

One process (DCP's single-process mode) saves through GavelJob(..., sharded=True);
then the folder, a step directory, a shard or the marker is tampered with. Nothing
tampered may be loaded: the loader falls back to the older complete directory, or
refuses the folder with CheckpointDirError. The tests run as root and hand files to
`nobody` (uid 65534) to play the other user. tests/job/test_sharded.py has the
2-rank runs.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from waiting import returns_within

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from slurm_gavel.job import GavelJob  # noqa: E402
from slurm_gavel.job.checkpoint import CheckpointDirError, UnsafeCheckpointError  # noqa: E402
from slurm_gavel.job.sharded import SoloGroup, load_sharded  # noqa: E402
from slurm_gavel.job.sharded_dir import MARKER, step_dir_name  # noqa: E402

pytestmark = [
    pytest.mark.hostile,
    pytest.mark.torch,
    # the planted payloads are plain pickles, which torch.load reads as legacy files
    pytest.mark.filterwarnings("ignore:Detected pickle protocol"),
]
NOBODY = 65534


def _model(seed: int) -> tuple[nn.Module, Any]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def _save(folder: Path, step: int, seed: int, **values: Any) -> nn.Module:
    model, opt = _model(seed)
    job = GavelJob(model, opt, enabled=True, sharded=True, checkpoint_dir=folder, env={})
    job.step = step
    job.checkpoint(**values)
    job.close()
    return model


def _load(folder: Path, allow_pickle: bool = False) -> tuple[int, nn.Module] | None:
    model, opt = _model(99)
    got = load_sharded(SoloGroup(), folder, {"model": model, "optimizer": opt}, allow_pickle)
    return None if got is None else (got[1], model)


def _same(a: nn.Module, b: nn.Module) -> bool:
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    return all(torch.equal(x, y) for x, y in pairs)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    tmp_path.chmod(0o700)
    return tmp_path / "ck"


@pytest.fixture
def two(folder: Path) -> tuple[nn.Module, nn.Module]:
    """Complete checkpoints at steps 1 and 2 (different models)."""
    return _save(folder, 1, seed=1), _save(folder, 2, seed=2)


def _shard(folder: Path, step: int) -> Path:
    return next((folder / step_dir_name(step)).glob("__0_*.distcp"))


def _rewrite_marker(folder: Path, step: int, fn: Any) -> None:
    marker = folder / step_dir_name(step) / MARKER
    marker.write_text(fn(marker.read_text()))


def test_round_trip_restores_model_optimizer_values_and_rng(folder: Path) -> None:
    model, opt = _model(5)
    torch.manual_seed(7)
    job = GavelJob(model, opt, enabled=True, sharded=True, checkpoint_dir=folder, env={})
    job.step = 12
    path = job.checkpoint(epoch=3, note=[1, "a"])
    assert path == folder / "dcp-000000000012"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    want = torch.rand(3)
    job.close()

    model2, opt2 = _model(6)
    env = {"SLURM_JOB_ID": "1", "SLURM_RESTART_COUNT": "1"}
    job2 = GavelJob(model2, opt2, sharded=True, checkpoint_dir=folder, env=env, epoch=0)
    assert job2.resume() == 12
    assert _same(model, model2)
    for a, b in zip(
        opt.state_dict()["state"].values(), opt2.state_dict()["state"].values(), strict=True
    ):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"])
    assert job2.restored("epoch") == 3 and job2.restored("note", None) is None  # not ours
    assert torch.equal(torch.rand(3), want)  # the RNG stream went on from the save
    job2.close()


def test_only_the_newest_two_are_kept_and_partials_are_removed(folder: Path) -> None:
    for step in (1, 2):
        _save(folder, step, seed=step)
    (folder / ".dcp-000000000009.abcdef.partial").mkdir(mode=0o700)
    _save(folder, 3, seed=3)
    assert sorted(p.name for p in folder.iterdir()) == ["dcp-000000000002", "dcp-000000000003"]


def test_a_partial_directory_is_never_loaded(folder: Path, two: Any) -> None:
    (folder / step_dir_name(2)).rename(folder / ".dcp-000000000002.abcdef.partial")
    got = _load(folder)
    assert got is not None and got[0] == 1 and _same(got[1], two[0])


def test_a_symlinked_checkpoint_folder_is_refused(tmp_path: Path, folder: Path, two: Any) -> None:
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(CheckpointDirError, match="symlink or not a folder"):
        _load(link)
    with pytest.raises(CheckpointDirError):
        _save(link, 3, seed=3)


def test_a_checkpoint_folder_of_another_user_is_refused(folder: Path, two: Any) -> None:
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(CheckpointDirError, match=f"belongs to uid {NOBODY}"):
        _load(folder)
    with pytest.raises(CheckpointDirError):
        _save(folder, 3, seed=3)


def test_a_checkpoint_folder_writable_by_others_is_refused(folder: Path, two: Any) -> None:
    folder.chmod(0o777)
    with pytest.raises(CheckpointDirError, match="chmod 700"):
        _load(folder)


@pytest.mark.parametrize("how", ["owner", "mode", "symlink", "file"])
def test_a_step_directory_not_ours_is_skipped(
    tmp_path: Path, folder: Path, two: Any, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    newest = folder / step_dir_name(2)
    if how == "owner":
        os.chown(newest, NOBODY, NOBODY)
    elif how == "mode":
        newest.chmod(0o770)
    else:  # a complete directory elsewhere (or a file) put under the newest name
        elsewhere = tmp_path / "elsewhere"
        newest.rename(elsewhere)
        if how == "symlink":
            newest.symlink_to(elsewhere)
        else:
            newest.write_bytes(b"x")
    got = _load(folder)
    assert got is not None and got[0] == 1 and _same(got[1], two[0])
    assert f"ignoring incomplete checkpoint {newest}" in capsys.readouterr().err


def test_a_shard_of_another_user_or_a_symlinked_shard_is_skipped(
    tmp_path: Path, folder: Path, two: Any
) -> None:
    shard = _shard(folder, 2)
    os.chown(shard, NOBODY, NOBODY)
    got = _load(folder)
    assert got is not None and got[0] == 1
    os.chown(shard, 0, 0)
    copy = tmp_path / "copy"
    copy.write_bytes(shard.read_bytes())
    shard.unlink()
    shard.symlink_to(copy)  # the same bytes, but through a link
    got = _load(folder)
    assert got is not None and got[0] == 1


def test_a_truncated_shard_is_skipped(
    folder: Path, two: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = _shard(folder, 2)
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])
    got = _load(folder)
    assert got is not None and got[0] == 1 and _same(got[1], two[0])
    assert "is torn" in capsys.readouterr().err


def test_a_corrupt_shard_of_the_right_length_is_skipped(
    folder: Path, two: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    shard = _shard(folder, 2)
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    got = _load(folder)
    assert got is not None and got[0] == 1
    assert "does not match its marker (corrupt)" in capsys.readouterr().err


def _lie_hash(text: str) -> str:  # a marker that vouches for other bytes than the shard's
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.endswith(".distcp"))
    parts = lines[i].split(" ")
    parts[1] = hashlib.sha256(b"other").hexdigest()
    lines[i] = " ".join(parts)
    return "\n".join(lines) + "\n"


def _lie_length(text: str) -> str:
    lines = text.splitlines()
    i = next(i for i, line in enumerate(lines) if line.endswith(".distcp"))
    parts = lines[i].split(" ")
    parts[2] = str(int(parts[2]) + 10)
    lines[i] = " ".join(parts)
    return "\n".join(lines) + "\n"


LIES = {
    "wrong hash": (_lie_hash, "does not match its marker"),
    "wrong length": (_lie_length, "is torn"),
    "another step": (lambda t: t.replace("step 000000000002", "step 000000000001"), "another"),
    "a file left out": (
        lambda t: "\n".join(x for x in t.splitlines() if "gavel.pt.sha256" not in x) + "\n",
        "other files than its marker lists",
    ),
    "a path outside": (lambda t: t + f"file {'0' * 64} 1 ../../etc/passwd\n", "bad line"),
    "a listed file that is not there": (
        lambda t: t + f"file {'0' * 64} 1 __9_0.distcp\n",
        "missing",
    ),
    "a name twice": (lambda t: t + t.splitlines()[-1] + "\n", "bad line"),
    "no header": (lambda t: t.split("\n", 1)[1], "not a slurm-gavel marker"),
    "empty": (lambda t: "", "not a slurm-gavel marker"),
    "huge": (lambda t: t + "x" * (2 << 20), "larger than"),
}


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_marker_that_lies_makes_the_directory_incomplete(
    folder: Path, two: Any, lie: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fn, said = LIES[lie]
    _rewrite_marker(folder, 2, fn)
    got = _load(folder)
    assert got is not None and got[0] == 1 and _same(got[1], two[0])
    assert said in capsys.readouterr().err


def test_a_missing_marker_or_a_marker_that_is_no_regular_file_never_blocks(
    folder: Path, two: Any
) -> None:
    marker = folder / step_dir_name(2) / MARKER
    marker.unlink()
    got = _load(folder)
    assert got is not None and got[0] == 1
    os.mkfifo(marker)  # a plain read would wait for a writer forever
    out = returns_within(30, lambda: _load(folder), "the loader on a FIFO marker")
    assert out is not None and out[0] == 1


class Planted:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.marker,))


def _replant(folder: Path, step: int, name: str, payload: bytes) -> None:
    """Replace one file and make the marker vouch for it (what a writer could do)."""
    d = folder / step_dir_name(step)
    (d / name).write_bytes(payload)
    digest = hashlib.sha256(payload).hexdigest()
    lines = [
        f"file {digest} {len(payload)} {name}" if line.endswith(f" {name}") else line
        for line in (d / MARKER).read_text().splitlines()
    ]
    (d / MARKER).write_text("\n".join(lines) + "\n")


def test_dcp_metadata_that_would_run_code_is_refused_not_loaded(
    tmp_path: Path, folder: Path, two: Any
) -> None:
    pwned = tmp_path / "pwned"
    _replant(folder, 2, ".metadata", pickle.dumps(Planted(pwned)))
    with pytest.raises(UnsafeCheckpointError, match="GAVEL_CHECKPOINT_ALLOW_PICKLE=1"):
        _load(folder)
    assert not pwned.exists()


def test_a_plain_payload_that_would_run_code_is_refused_not_loaded(
    tmp_path: Path, folder: Path, two: Any
) -> None:
    pwned = tmp_path / "pwned"
    payload = pickle.dumps({"step": 2, "rng": [], "values": {"x": Planted(pwned)}})
    _replant(folder, 2, "gavel.pt", payload)
    record = f"sha256 {hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode()
    _replant(folder, 2, "gavel.pt.sha256", record)
    with pytest.raises(UnsafeCheckpointError, match="allow_pickle=True"):
        _load(folder)
    assert not pwned.exists()


def test_dcp_values_are_loaded_weights_only(folder: Path) -> None:
    """A non-tensor value inside the DCP shards (an optimizer's hyper-parameters) that is
    not plain data is refused unless allow_pickle (DCP itself would unpickle it)."""

    class Odd:
        def state_dict(self) -> dict[str, Any]:
            return {"when": Path("p")}  # a class instance: not weights-only data

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.state = state

    job = GavelJob(enabled=True, sharded=True, checkpoint_dir=folder, env={}, odd=Odd())
    job.step = 1
    job.checkpoint()
    target = Odd()
    with pytest.raises(Exception, match="allow_pickle"):
        load_sharded(SoloGroup(), folder, {"odd": target}, False)
    load_sharded(SoloGroup(), folder, {"odd": target}, True)
    assert target.state == {"when": Path("p")}


def test_saving_a_step_again_replaces_its_directory(folder: Path) -> None:
    _save(folder, 2, seed=2)
    newer = _save(folder, 2, seed=3)  # e.g. checkpoint_every, then the signal, same step
    assert sorted(p.name for p in folder.iterdir()) == ["dcp-000000000002"]
    got = _load(folder)
    assert got is not None and got[0] == 2 and _same(got[1], newer)


@pytest.mark.parametrize(
    "payload",
    [
        pickle.dumps(os.system),  # posix.system
        pickle.dumps(torch.load),  # torch.serialization.load: a torch module, not metadata
        b"ctorch\nload\n.",  # torch.load through the allowed module "torch"
        b"ctorch.utils.bottleneck.__main__\nmain\n.",  # importing it would run code
        b"cpathlib\nPath.touch\n.",  # an allowed module, a method of a class in it
    ],
)
def test_dcp_metadata_naming_anything_but_its_classes_is_refused(
    folder: Path, two: Any, payload: bytes
) -> None:
    _replant(folder, 2, ".metadata", payload)
    with pytest.raises(UnsafeCheckpointError, match="is not DCP metadata"):
        _load(folder)
    assert "torch.utils.bottleneck.__main__" not in sys.modules


def test_vouched_for_metadata_that_is_no_pickle_is_skipped_never_a_crash(
    folder: Path, two: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A .metadata the marker vouches for, which still does not load."""
    _replant(folder, 2, ".metadata", b"\x80\x04not a pickle at all")
    got = _load(folder)
    assert got is not None and got[0] == 1 and _same(got[1], two[0])
    err = capsys.readouterr().err
    assert f"ignoring checkpoint {folder / step_dir_name(2)}: cannot load .metadata" in err
