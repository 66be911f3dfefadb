"""Column generation for LPs with many more columns than a vertex uses (pair variables).

The packed max-min LP has one column per (class pair, GPU type); with many classes
per job type (several priority weights, per-job throughputs) that is tens or
hundreds of thousands of columns, of which an optimal vertex uses at most one per
row. So HiGHS first sees only the columns that are always worth having (single
time, z) and the pair columns are priced: with the row duals y of the restricted
optimum, a missing column j can improve it only if its reduced cost
c_j - a_j . y > 0 (maximisation). Those columns (the best `batch` of them) are
added and the LP re-solved from the current basis, until none is left. The
result is an optimum of the full LP (to HiGHS's dual feasibility tolerance),
not an approximation. Pricing all columns is one sparse product.

How HiGHS re-solves is a choice of the caller (`resolve`): by default each
re-solve is HiGHS's dual simplex from the current basis. With resolve="primal"
a re-solve after new columns or a new cost is primal simplex (the basis is still
primal feasible then: new columns sit at zero, and stage 2 keeps the stage-1
point feasible), and one after new rows is dual simplex (the basis is still dual
feasible then). The optimum is the same; only the pivots differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import highspy
import numpy as np

from slurm_gavel.policies.solvers.lp import highs_model, run_to_optimum

if TYPE_CHECKING:  # only annotations here: see mm_lp.py
    import scipy.sparse as sp

# Same as HiGHS's default dual feasibility tolerance: columns priced below it are
# as optimal as HiGHS's own answer for the columns it holds.
PRICE_TOL = 1e-7


class PricedLp:
    """max cost @ x s.t. row_lower <= A x <= row_upper, col_lower <= x <= col_upper."""

    def __init__(
        self,
        a: sp.csc_matrix,
        row_lower: np.ndarray,
        row_upper: np.ndarray,
        col_upper: np.ndarray,
        cost: np.ndarray,
        active: np.ndarray,
        *,
        solver: str = "simplex",
        time_limit: float | None = None,
        batch: int = 500,
        resolve: str = "dual",
    ) -> None:
        self.a = a
        self._a_t: sp.csr_matrix | None = None  # A^T for pricing, built on first use
        self.cost = cost.astype(np.float64).copy()
        self.col_lower = np.zeros(a.shape[1])
        self.col_upper = col_upper.astype(np.float64)
        self.active = active.copy()
        self.order = np.nonzero(active)[0]  # HiGHS column k is column order[k] of A
        self.pos = np.full(a.shape[1], -1)
        self.pos[self.order] = np.arange(len(self.order))
        self.batch = batch
        self.rounds = 0
        self.resolve = resolve
        self.runs: list[str] = []  # the method of each HiGHS run: ipm, dual, primal
        self._new_rows = False  # rows added since the last run (resolve="primal": dual)
        self._first = solver

        # With every column active (no pricing: the common, small case) A goes in as
        # is; the column slice would be the same matrix, only slower to build.
        sub = a if len(self.order) == a.shape[1] else a[:, self.order]
        self.h = highs_model(
            self.cost[self.order],
            sub,
            row_lower,
            row_upper,
            self.col_lower[self.order],
            self.col_upper[self.order],
            maximize=True,
            time_limit=time_limit,
        )
        self.h.setOptionValue("solver", solver)

    def set_cost(self, cost: np.ndarray) -> None:
        self.cost = cost.astype(np.float64).copy()
        n = len(self.order)
        self.h.changeColsCost(n, np.arange(n, dtype=np.int32), self.cost[self.order])

    def set_lower(self, col: int, lower: float) -> None:
        """Change one column's lower bound (the column must be active)."""
        self.col_lower[col] = lower
        self.h.changeColBounds(int(self.pos[col]), lower, float(self.col_upper[col]))

    def add_row(self, cols: np.ndarray, coeff: np.ndarray, lower: float, upper: float) -> None:
        """Append the row lower <= sum coeff[i] x[cols[i]] <= upper (full column indices).

        The row joins A, so pricing sees its dual; HiGHS gets the active columns' part
        now and each priced-in column brings its coefficient along.
        """
        import scipy.sparse as sp

        row = sp.csc_matrix(
            (coeff, (np.zeros(len(cols), dtype=np.int64), cols)), shape=(1, self.a.shape[1])
        )
        self.a = sp.vstack([self.a, row], format="csc")
        self._a_t = None
        on = self.active[cols]
        self.h.addRow(
            lower, upper, int(on.sum()),
            self.pos[cols[on]].astype(np.int32), coeff[on].astype(np.float64),
        )  # fmt: skip
        self._new_rows = True

    def solve(self, what: str) -> np.ndarray:
        """Optimise, pricing in missing columns until none improves; full-length x."""
        while True:
            self._run(what)
            self.h.setOptionValue("solver", "simplex")  # re-solves start from the basis
            if self.active.all():
                break
            y = np.asarray(self.h.getSolution().row_dual)
            if self._a_t is None:
                self._a_t = self.a.T.tocsr()
            reduced = self.cost - self._a_t @ y
            reduced[self.active] = -np.inf
            cand = np.nonzero(reduced > PRICE_TOL)[0]
            if len(cand) == 0:
                break
            if len(cand) > self.batch:
                cand = cand[np.argpartition(-reduced[cand], self.batch)[: self.batch]]
            self._add(np.sort(cand))
        x = np.zeros(self.a.shape[1])
        x[self.order] = np.asarray(self.h.getSolution().col_value)
        return x

    def _add(self, cols: np.ndarray) -> None:
        sub = self.a[:, cols]
        self.h.addCols(
            len(cols),
            self.cost[cols],
            self.col_lower[cols],
            self.col_upper[cols],
            sub.nnz,
            sub.indptr[:-1].astype(np.int32),
            sub.indices.astype(np.int32),
            sub.data.astype(np.float64),
        )
        self.pos[cols] = np.arange(len(self.order), len(self.order) + len(cols))
        self.order = np.concatenate([self.order, cols])
        self.active[cols] = True
        self.rounds += 1

    def _run(self, what: str) -> None:
        if not self.runs:
            self.runs.append(self._first)
            if self._first == "ipm":
                # interior point + crossover: a vertex and its basis, like the simplex
                self.h.run()
                if self.h.getModelStatus() == highspy.HighsModelStatus.kOptimal:
                    return
                self.h.clearSolver()  # IPM or crossover failed: the simplex from scratch
                self.h.setOptionValue("solver", "simplex")
                self.runs.append("dual")
            run_to_optimum(self.h, what)
            return
        if self.resolve == "primal":
            method = "dual" if self._new_rows else "primal"
            self.h.setOptionValue("simplex_strategy", 1 if method == "dual" else 4)
            self.runs.append(method)
        else:
            self.runs.append("dual")
        self._new_rows = False
        run_to_optimum(self.h, what)
