"""The one GRES/TRES reader (fields.gres_entries and its filters) against the six readers
it replaced, kept below verbatim as they were (commit 896bad6): fields.gpu_gres,
fields.shard_gres, fields.gres_indices, cli/jobs_from_text._gres_names, sacct's
AllocTRES reader and report's sinfo %G reader (sacct's JSON TRES reader:
tests/accounting/test_sacct_fields.py).

Each old reader and its new form agree on the shapes Slurm writes (the captured JSON of
every release, sacct's captures) and on hostile text; where the old ones disagreed with
each other, on text no Slurm release writes, the one grammar decides, and the cases
are listed here (DIFFERS_ON_PURPOSE).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slurm_gavel.backends.slurm.fields import (
    GresEntry,
    gpu_counts,
    gpu_gres,
    gres_entries,
    gres_indices,
    gres_names,
    shard_gres,
    tres_gpus,
    tres_name,
    typed_gpus,
)

TESTS = Path(__file__).parents[2]

# --- the old readers, verbatim --------------------------------------------------------

_OLD_GRES_ITEM = re.compile(r"^gpu(?::([^:=(]+))?[:=](\d+)(?:\(.*\))?$")
_OLD_SHARD_ITEM = re.compile(r"^shard(?::([^:=(]+))?[:=](\d+)(?:\(.*\))?$")
_OLD_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)$")
_OLD_PER_GPU = re.compile(r"\(((?:[0-9-]+/\d+,?)+)\)$")


def old_gpu_gres(text: str) -> list[tuple[str | None, int]]:
    out: list[tuple[str | None, int]] = []
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        if item == "gpu":
            out.append((None, 1))
            continue
        m = _OLD_GRES_ITEM.match(item)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


def old_shard_gres(text: str) -> list[tuple[str | None, int]]:
    out: list[tuple[str | None, int]] = []
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        m = _OLD_SHARD_ITEM.match(item)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


def old_gres_indices(detail: str, name: str) -> tuple[int, ...]:
    out: set[int] = set()
    for item in re.split(r",(?![^()]*\))", detail or ""):
        item = item.strip()
        if item.split(":", 1)[0] != name:
            continue
        m = _OLD_IDX.search(item)
        if m:
            for part in m.group(1).split(","):
                lo, _, hi = part.partition("-")
                if lo.isdigit() and (not hi or hi.isdigit()):
                    out.update(range(int(lo), int(hi or lo) + 1))
            continue
        m = _OLD_PER_GPU.search(item)
        if m:
            for i, used in enumerate(p.split("/")[0] for p in m.group(1).split(",")):
                if used.isdigit() and int(used) > 0:
                    out.add(i)
    return tuple(sorted(out))


def old_gres_names(tres: str) -> set[str]:  # cli/jobs_from_text.py
    out = set()
    for item in tres.split(","):
        name = item.removeprefix("gres/").removeprefix("gres:")
        out.add(re.split("[:=]", name, maxsplit=1)[0])
    return out


def old_tres_gpus(text: str) -> tuple[dict[str, int], int]:  # accounting/sacct.py, -P
    typed: dict[str, int] = {}
    total = 0
    for item in text.split(","):
        key, _, value = item.partition("=")
        if not value.isdigit():
            continue
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:"):
            typed[key[9:]] = typed.get(key[9:], 0) + int(value)
    return typed, max(total, sum(typed.values()))


def old_sinfo_gpus(gres: str) -> dict[str, int]:  # commands/report.py, one node's line
    seen: dict[str, int] = {}
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and len(parts) == 3 and parts[2].isdigit():
            seen[parts[1]] = int(parts[2])
    return seen


# --- the new forms of each ------------------------------------------------------------


def _pairs() -> list[tuple[str, Any, Any]]:
    return [
        ("gpu_gres", old_gpu_gres, gpu_gres),
        ("shard_gres", old_shard_gres, shard_gres),
        ("indices gpu", lambda t: old_gres_indices(t, "gpu"), lambda t: gres_indices(t, "gpu")),
        ("indices shard", lambda t: old_gres_indices(t, "shard"),
         lambda t: gres_indices(t, "shard")),
        ("names", old_gres_names, gres_names),
        ("tres", old_tres_gpus, tres_gpus),
        ("sinfo", old_sinfo_gpus, typed_gpus),
    ]  # fmt: skip


HOSTILE = [
    "", "(null)", "N/A", ",", ",,", " ", "\n", "gpu:", "gpu::2", "gpu:v100:", ":2", "=2",
    "gpu:v100:2:3", "gpu:v100:-1", "gpu:v100:+1", "gpu:v100:1e3", "gpu:v100:0x10",
    "gpu:v100:99999999999999999999", "gpu:٢", "gpu:v100:٣", "gres/gpu=٢",
    "gpu:v100:2(IDX:0-1", "gpu:v100:2IDX:0-1)", "gpu:v100:2((IDX:0))", "gpu(x):2",
    "GPU:v100:2", "gpu :2", "gpu: 2", "gpu:v 100:2", "gpu:v100:2\x00", "gpu:\x1b[2J:1",
    "gpu:v100:2(IDX:9-0)", "gpu:v100:2(IDX:a-b)", "gpu:v100:1(IDX:N/A)", "shard:1(-/2,1/2)",
    "gres/", "gres:", "gres/gres/gpu:1", "gres::gpu:1", "gpu,gpu,gpu", "shard",
    "x" * 5000 + ",gpu:1", "gpu:v100:1(" + "(" * 200 + ")", "gpu:" + "1" * 300,
    "gpu:v100:2(IDX:0,1),shard:v100:4(IDX:0,1)", "cpu=4,mem=8G,gres/gpu=2,gres/gpu:v100=2",
    "billing=1,cpu=1,gres/gpu:v100=1,gres/gpu=1,node=1", "gres/gpu=2,gres/gpu=3",
    "gres/gpu:v100=1,gres/gpu:v100=2", "gres/gpu:v100=0,gres/gpu=0", "gres/gpumem=1G",
    "gpu:v100:4(S:0-1),gpu:v100:2(S:1)", "gpu:v100:4(S:0,2)", "gpu:a100-sxm4-80gb:8(S:0-1)",
    "gpu:v100:4(S:0-1),shard:v100:8(S:0-1),nic:1", "license/matlab=1,gres/gpu=1",
    "gres/gpu:v100:1,gres/shard:2", "gres:gpu:v100:1,gres:shard:2", "gres/gpu:1,gres/mps:100",
]  # fmt: skip

# The text no Slurm release writes, where the old readers disagreed with each other and
# the one grammar decides: (reader, text, what the old one read, what is read now).
DIFFERS_ON_PURPOSE = [
    # AllocTRES: a GPU entry in the request's shapes (':' count, 22.05's gres: prefix,
    # a detail, spaces) is read as gpu_gres reads it; the old reader skipped it.
    ("tres", "gres/gpu:2", ({}, 0), ({}, 2)),
    ("tres", "gres:gpu:v100=1", ({}, 0), ({"v100": 1}, 1)),
    ("tres", " gres/gpu=2", ({}, 0), ({}, 2)),
    ("tres", "gres/gpu=2(IDX:0)", ({}, 0), ({}, 2)),
    # a type holding ':' or '(' is no type (Slurm splits on them)
    ("tres", "gres/gpu:a:b=2", ({"a:b": 2}, 2), ({}, 0)),
    ("tres", "gres/gpu:v(1)=2", ({"v(1)": 2}, 2), ({}, 0)),
    # a count the old reader's isdigit() took and int() refused: it raised
    ("tres", "gres/gpu=²", ValueError, ({}, 0)),
    ("sinfo", "gpu:v100:²", ValueError, {}),
    # sinfo: the TRES shapes, and text after the detail
    ("sinfo", "gpu:v100=4", {}, {"v100": 4}),
    ("sinfo", "gres/gpu:v100:4", {}, {"v100": 4}),
    ("sinfo", "gpu:v100:4(S:0)x", {"v100": 4}, {}),
    ("sinfo", "gpu:v100:2(IDX:0-1", {"v100": 2}, {}),
    ("sinfo", "gpu::2", {"": 2}, {}),  # an empty type
    ("sinfo", "gpu:a=b:4", {"a=b": 4}, {}),
    # a doubled prefix: one prefix rule (gres: then gres/), as gpu_gres always read it
    ("names", "gres:gres/gpu:1", {"gres/gpu"}, {"gpu"}),
    ("names", "gres/gres:gpu:1", {"gpu"}, {"gres"}),
]


def _call(f: Any, text: str) -> Any:
    try:
        return f(text)
    except ValueError:
        return ValueError


def _differs_on_purpose(reader: str, text: str) -> bool:
    return any(r == reader and t == text for r, t, _, _ in DIFFERS_ON_PURPOSE)


def _captured_gres() -> Iterator[tuple[str, str]]:
    """(field, text) of every GRES/TRES string of the captured JSON of every release,
    and of sacct's AllocTRES."""
    keys = {"gres", "gres_used", "gres_detail", "tres_per_node", "tres_per_job",
            "tres_per_task", "tres_per_socket"}  # fmt: skip

    def walk(doc: Any) -> Iterator[str]:
        if isinstance(doc, Mapping):
            for k, v in doc.items():
                if k in keys and isinstance(v, str):
                    yield k, v
                elif k in keys and isinstance(v, list):
                    yield from ((k, s) for s in v if isinstance(s, str))
                else:
                    yield from walk(v)
        elif isinstance(doc, list):
            for v in doc:
                yield from walk(v)

    for path in sorted((TESTS / "backends" / "data").rglob("*.json")):
        try:
            doc = json.loads(path.read_text(errors="surrogateescape"))
        except ValueError:
            continue
        yield from walk(doc)
    for path in sorted((TESTS / "data" / "sacct").rglob("sacct-P.txt")):
        for line in path.read_text().splitlines()[1:]:
            cells = line.split("|#7f3a#|")
            if len(cells) > 10:
                yield "AllocTRES", cells[10]


CAPTURED = sorted(set(_captured_gres()))
# Which fields each reader reads: sacct's AllocTRES; sinfo %G prints a node's gres.
DOMAIN = {"tres": {"AllocTRES"}, "sinfo": {"gres", "gres_used"}}


def test_the_captures_hold_every_shape():
    joined = "\n".join(text for _, text in CAPTURED)
    for shape in ("gres/gpu:", "gres:gpu:", "(IDX:", "shard:", "gres/gpu=", "gpu:v100:"):
        assert shape in joined, shape
    assert len(CAPTURED) > 30


@pytest.mark.parametrize("reader, old, new", _pairs(), ids=[p[0] for p in _pairs()])
def test_every_captured_string_reads_as_before(reader, old, new):
    fields = DOMAIN.get(reader, {field for field, _ in CAPTURED} - {"AllocTRES"})
    texts = [text for field, text in CAPTURED if field in fields]
    assert texts
    for text in texts:
        assert new(text) == old(text), (reader, text)


@pytest.mark.hostile(inputs=len(HOSTILE))
@pytest.mark.parametrize("reader, old, new", _pairs(), ids=[p[0] for p in _pairs()])
def test_old_shapes_and_hostile_text_read_as_before(reader, old, new):
    for text in HOSTILE:
        now = new(text)  # never raises
        if _in_shape(reader, text) and not _differs_on_purpose(reader, text):
            assert now == _call(old, text), (reader, text)


def _in_shape(reader: str, text: str) -> bool:
    """Whether text is in the shape of the output the reader reads: sacct's AllocTRES
    KEY=COUNT entries, sinfo's GRES without '=' or a gres prefix; the readers of JSON
    and squeue text read every shape. In another output's shape, the one grammar reads
    an entry as every reader does (tres_gpus("gres/gpu:v100:1") is 1 GPU: the old
    AllocTRES reader skipped it)."""
    items = text.split(",")
    if reader == "tres":
        return all("=" in i and "(" not in i and not any(c.isspace() for c in i) for i in items)
    if reader == "sinfo":
        return "=" not in text and "gres" not in text
    return True


@pytest.mark.parametrize("reader, text, before, now", DIFFERS_ON_PURPOSE)
def test_where_the_old_readers_disagreed_the_one_grammar_decides(reader, text, before, now):
    old, new = next((o, n) for r, o, n in _pairs() if r == reader)
    assert _call(old, text) == before
    assert new(text) == now


# Pieces of every shape, hostile ones included, for the property test.
_PIECES = st.sampled_from(
    ["gpu", "shard", "mps", "nic", "gres/", "gres:", "v100", "k80", ":", "=", ",", "(", ")",
     "0", "1", "2", "10", "IDX:0-1", "IDX:0,2", "S:0", "1/2", "0/2", "-", " ", "\n", "٢",
     "²", "x", "(null)", "N/A", "cpu=4", "mem=8G"]
)  # fmt: skip


@pytest.mark.hostile
@settings(max_examples=1500, deadline=None)
@given(st.lists(_PIECES, max_size=10).map("".join))
def test_the_gpu_and_shard_readers_agree_with_the_old_on_any_text(text):
    """The readers the daemon's rounds depend on (from_json, jobs_from_text) read every
    text as before: gpu_gres, shard_gres, gres_indices exactly; gres_names but for a
    doubled prefix."""
    assert gpu_gres(text) == old_gpu_gres(text)
    assert shard_gres(text) == old_shard_gres(text)
    for name in ("gpu", "shard"):
        assert gres_indices(text, name) == old_gres_indices(text, name)
    if "gres/gres:" not in text and "gres:gres/" not in text:
        assert gres_names(text) == old_gres_names(text)
    typed_gpus(text), tres_gpus(text)  # never raise


_TYPE = st.text(st.characters(blacklist_characters=":=(),", codec="utf-8"), min_size=1, max_size=8)
_ALLOC_KEYS = ["cpu", "mem", "node", "billing", "gres/gpu", "gres/shard", "gres/gpumem"]
_ALLOC_ITEM = st.one_of(
    st.tuples(st.sampled_from(_ALLOC_KEYS), st.sampled_from(["1", "2", "0", "16", "8G", "", "٢"])),
    st.tuples(_TYPE.map("gres/gpu:{}".format), st.sampled_from(["1", "2", "0", "8G", "٢"])),
).map("=".join)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_ALLOC_ITEM, max_size=6).map(",".join))
def test_alloc_tres_in_sacct_shapes_reads_as_before(text):
    """sacct's AllocTRES (KEY=COUNT, GPU types of any characters Slurm allows in one)."""
    if any(c.isspace() for c in text):  # an entry is stripped now (gres/gpu:x =2)
        return
    assert tres_gpus(text) == old_tres_gpus(text)


_SINFO_GPU = st.tuples(
    _TYPE, st.sampled_from(["1", "4", "0", "٢"]), st.sampled_from(["", "(S:0)", "(S:0,2)"])
)
_SINFO_ITEM = st.one_of(
    _SINFO_GPU.map(lambda t: f"gpu:{t[0]}:{t[1]}{t[2]}"),
    st.sampled_from(["gpu:4", "gpu:4(S:0)", "shard:8", "shard:v100:8(S:0)", "(null)", "nic:1"]),
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(_SINFO_ITEM, max_size=5).map(",".join))
def test_sinfo_gres_in_sinfo_shapes_reads_as_before(text):
    if any(c.isspace() for c in text):
        return
    assert typed_gpus(text) == old_sinfo_gpus(text)


def test_entries_say_what_each_shape_holds():
    assert gres_entries("gpu:v100:2(IDX:0-1),shard:4,gres/gpu=3,gres:nic:1,mem=8G,gpu") == [
        GresEntry("gpu", "v100", 2, "(IDX:0-1)"),
        GresEntry("shard", None, 4),
        GresEntry("gpu", None, 3),
        GresEntry("nic", None, 1),
        GresEntry("gpu", None, None),
    ]
    assert gres_entries("") == gres_entries("(null)") == gres_entries("N/A") == []
    assert tres_name("gpu:v100") == ("gpu", "v100") and tres_name("gpu") == ("gpu", None)
    assert tres_name("gpu:") is None and tres_name("") is None
    assert gpu_counts([(None, 2), ("v100", 1), ("v100", 1), (None, 1)]) == ({"v100": 2}, 2)
    assert typed_gpus("gpu:v100:4(S:0-1),gpu:2,shard:v100:8") == {"v100": 4}
