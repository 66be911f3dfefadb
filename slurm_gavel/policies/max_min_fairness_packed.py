"""max_min_fairness_packed: max-min fairness with space sharing (Gavel's ...WithPacking).

Besides time alone (x_jt), two jobs of the same scale factor whose types have a
pair_throughputs entry may share s GPUs of type t for a fraction y_pt of the time;
each then runs at its side of the pair throughput. A job's row sums its single and
paired time (<= 1); a pair occupies s GPUs once. Same objective and normalisation
as max_min_fairness, same second stage.

Multi-GPU jobs pair too (Gavel's code crashes on them): the pair throughputs for
s > 1 come from the problem (the throughput table estimates them, see
ThroughputTable.pair).

Fast path: class-pair variables Y_{c,d,t} (total pair time between two classes),
exact by the same symmetry argument as the classes themselves, then disaggregated
to at most n_c + n_d - 1 concrete job pairs per class pair (north-west corner) and
n_c pairs within a class (cyclic); see mm_lp.py and mm_disaggregate.py. With many
class pairs (several priority weights per job type) the pair columns enter the LP
by pricing (mm_pricing.py), still exactly. From GROUP_MIN_CLASSES classes on
(distinct jobs: no classes form) pair time is a column per job, partner job type
and GPU type instead of per job pair (mm_pack_groups.py), with the same optimum.
"""

from __future__ import annotations

from slurm_gavel.domain.model import Allocation, Problem
from slurm_gavel.policies import PolicyOptions
from slurm_gavel.policies.solvers.mm_policy import allocate_max_min


def allocate(problem: Problem, options: PolicyOptions) -> Allocation:
    return allocate_max_min(
        problem, options, "max_min_fairness_packed", agnostic=False, packed=True
    )
