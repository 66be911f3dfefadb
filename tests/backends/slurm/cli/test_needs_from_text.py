"""A job's node needs from its listing text (slurm/cli/needs_from_text.py): each
--mem/--mem-per-cpu/--mem-per-gpu reading as the real releases print it
(test_jobs_from_text_on_slurm.py checks them against each release's JSON), and values
the text cannot say exactly, or that no Slurm prints, are not trusted."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.slurm.cli.needs_from_text import needs_from_text, needs_text_same
from slurm_gavel.backends.slurm.fit import JobNeeds

# a held job with no needs, as 26.05 prints it (tests/backends/data/26.05/listing.txt)
PLAIN = {
    "features": "(null)",
    "excluded_nodes": "",
    "memory_per_node": "1000M",
    "memory_per_tres": "N/A",
    "minimum_cpus_per_node": "1",
    "cpus_per_tres": "N/A",
    "prefer": "(null)",
    "tres_req": "cpu=1,mem=1000M,node=1,billing=1",
}


def printed(memory: str, cpus: str, tres: str) -> dict[str, str]:
    """A job's MinMemory, MinCPUs and request (TRES) as squeue prints them."""
    return {"memory_per_node": memory, "minimum_cpus_per_node": cpus, "tres_req": tres}


def needs(**fields: str) -> JobNeeds | None:
    return needs_from_text({**PLAIN, **fields}, tres_current=True, excluded_listed=True)


def test_a_plain_job_one_cpu_per_node_keeps_its_memory_per_node():
    assert needs() == JobNeeds(memory_per_node_mb=1000)


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        # --mem=1537 -c 2: the request holds 1537 in all
        (printed("1537M", "2", "cpu=2,mem=1537M,node=1,billing=2"),
         JobNeeds(memory_per_node_mb=1537, cpus_per_node=2)),
        # --mem-per-cpu=300 -c 3: 900 in all
        (printed("300M", "3", "cpu=3,mem=900M,node=1,billing=3"),
         JobNeeds(memory_per_cpu_mb=300, cpus_per_node=3)),
        # two nodes, 2 CPUs each: per CPU 100 -> 400 in all; per node 100 -> 200
        (printed("100M", "2", "cpu=4,mem=400M,node=2,billing=4"),
         JobNeeds(memory_per_cpu_mb=100, cpus_per_node=2)),
        (printed("100M", "2", "cpu=4,mem=200M,node=2,billing=4"),
         JobNeeds(memory_per_node_mb=100, cpus_per_node=2)),
        # the request's total rounded as slurmctld prints it
        (printed("64000M", "2", "cpu=2,mem=62.50G,node=1,billing=2"),
         JobNeeds(memory_per_node_mb=64000, cpus_per_node=2)),
        # --mem=0 (the whole node's memory): no figure to fit
        ({"memory_per_node": "0", "tres_req": "cpu=1,mem=62.50G,node=1,billing=1"},
         JobNeeds()),
        # --mem-per-gpu (24.11+: "gres/gpu:N"; 22.05: "gres:gpu:N", MinMemory the default)
        ({"memory_per_node": "700M", "memory_per_tres": "gres/gpu:700"},
         JobNeeds(memory_per_gpu_mb=700)),
        ({"memory_per_tres": "gres:gpu:700"}, JobNeeds(memory_per_gpu_mb=700)),
        # --cpus-per-gpu=2 with --mem-per-cpu=100: two CPUs asked on the node
        ({"memory_per_node": "100M", "cpus_per_tres": "gres/gpu:2",
          "tres_req": "cpu=2,mem=200M,node=1,billing=2"},
         JobNeeds(memory_per_cpu_mb=100, cpus_per_gpu=2)),
        ({"excluded_nodes": "k80-1,v100-[1-2]", "features": "v100|p100", "prefer": "v100"},
         JobNeeds(excluded=("k80-1", "v100-1", "v100-2"), features="v100|p100",
                  memory_per_node_mb=1000, prefer="v100")),
    ],
)  # fmt: skip
def test_each_reading_as_the_releases_print_it(fields, want):
    assert needs(**fields) == want


def test_one_cpu_per_node_with_cpus_per_gpu_cannot_say_per_cpu_from_per_node():
    """--cpus-per-gpu=1 --mem-per-cpu=100 on one GPU prints as --mem=100 would; the two
    differ on more GPUs (fit.JobNeeds.on_node): the JSON is read."""
    assert needs(memory_per_node="100M", cpus_per_tres="gres/gpu:1",
                 tres_req="cpu=1,mem=100M,node=1,billing=1") is None  # fmt: skip


def test_a_request_of_fewer_cpus_than_each_node_asks_is_not_read():
    """22.05: --cpus-per-gpu=2 --mem-per-cpu=100 on a job job_submit.lua took the GPU
    request off prints MinCPUs 2 and a request of one CPU (its JSON: 100 per CPU, 2 CPUs
    per node); read as one CPU per node it would say 100 per node. Its JSON is read."""
    assert needs(memory_per_node="100M", minimum_cpus_per_node="2",
                 tres_req="cpu=1,mem=100M,node=1,billing=1") is None  # fmt: skip
    assert needs(memory_per_node="100M", minimum_cpus_per_node="2",
                 tres_req="cpu=3,mem=300M,node=2,billing=3") is None  # fmt: skip


def test_only_a_current_tres_and_a_listed_exclude_are_read():
    """A requeued job's tres-alloc is its last run's allocation; 22.05 lists no --exclude."""
    both = {**PLAIN}
    assert needs_from_text(both, tres_current=False, excluded_listed=True) is None
    assert needs_from_text(both, tres_current=True, excluded_listed=False) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_per_node", "1.50G"),  # rounded: not exact (the listing asks --noconvert)
        ("memory_per_node", "-1M"),
        ("memory_per_node", "1000X"),
        ("memory_per_node", "9999999999999M"),
        ("memory_per_node", ""),
        ("memory_per_node", "1000 M"),
        ("minimum_cpus_per_node", "two"),
        ("minimum_cpus_per_node", "-2"),
        ("tres_req", "N/A"),
        ("tres_req", ""),
        ("tres_req", "cpu=x,mem=1000M,node=1"),
        ("tres_req", "cpu=2,mem=nan,node=1"),
        ("tres_req", "cpu=2,mem=inf,node=1"),
        ("tres_req", "cpu=2,mem=1e9M,node=1"),
        ("tres_req", "cpu=2,node=1"),
        ("tres_req", "cpu=2,mem=1000M,node=0"),
        ("tres_req", "cpu=2,mem=777M,node=1"),  # neither per node (1000) nor per CPU (2000)
        ("tres_req", "cpu=2,mem=1000M,mem=2000M,node=1 "),
        ("excluded_nodes", "v100-1 v100-2"),
        ("features", "v100 |p100"),
        ("prefer", "v100\nk80"),
        ("cpus_per_tres", "gres/gpu:1\t"),
    ],
)
def test_values_no_release_prints_are_not_trusted(field, value):
    fields = {"minimum_cpus_per_node": "2", "tres_req": "cpu=2,mem=1000M,node=1,billing=2"}
    assert needs(**{**fields, field: value}) is None, (field, value)


def test_unset_prints_as_none():
    got = needs(excluded_nodes="(null)", prefer="(null)", features="(null)")
    assert got == JobNeeds(memory_per_node_mb=1000)


def test_the_request_turning_into_the_allocation_is_no_change_of_needs():
    started = {**PLAIN, "tres_req": "cpu=4,mem=64000M,node=1,billing=4"}
    assert needs_text_same(PLAIN, started)
    assert not needs_text_same(PLAIN, {**PLAIN, "excluded_nodes": "k80-1"})
    assert not needs_text_same(PLAIN, {**PLAIN, "memory_per_node": "2000M"})


# every character str.isspace() calls whitespace (Unicode's too: a user's --prefer
# is text), each inside a value of each field
SPACES = [chr(c) for c in range(0x3001) if chr(c).isspace()]


@pytest.mark.parametrize("field", ["features", "excluded_nodes", "prefer", "cpus_per_tres",
                                   "memory_per_node", "tres_req"])  # fmt: skip
def test_any_whitespace_in_a_value_is_not_trusted(field):
    fields = {"minimum_cpus_per_node": "2", "tres_req": "cpu=2,mem=1000M,node=1,billing=2"}
    assert needs(**fields) is not None
    base = {**PLAIN, **fields}[field]
    for space in SPACES:
        value = base[:1] + space + base[1:]
        assert needs(**{**fields, field: value}) is None, (field, hex(ord(space)))
