"""The building blocks the policies share, apart from the policies themselves.

- ``lp``: HiGHS wrapper (warm starts, time limits, SolverError when no optimum).
- ``classes``: grouping identical jobs into classes (the LPs solve per class).
- ``mm_*``: the max-min fairness family (LP build, single-type fast path, pairs for
  space sharing, pricing, disaggregation back to jobs, the cvxpy reference).
- ``ftf_*``: the finish-time fairness family (per-job requirements, bisection solver),
  also used by min_total_duration, min_cost and the hierarchical policy.
- ``hier_water_filling``: the hierarchical policy's water filling over accounts.
- ``agnostic_split``: the symmetric point of the type-blind LP's optimal face.
- ``fifo_queue``: the arrival-order placement both FIFO policies use.
- ``dw`` and its users: the certified decomposition of the large per-job LPs;
  ``solve_paths`` records which LPs it solved and which fell back to the plain LP.
"""
