#!/usr/bin/env bash
# Moldable at (re)start against Gavel on converted trace windows
# (EXPERIMENTS.md, "Moldable at (re)start against Gavel").
#
#   bash benchmarks/moldable_experiments.sh OUT CLUSTER WINDOW.csv... [-- COSTS]
#
# WINDOW.csv: windows converted with `slurm-gavel trace philly|alibaba` (the data is
# fetched by the user: EXPERIMENTS.md says from where). CLUSTER: the --cluster spec
# (Philly: v100:6x4,p100:6x4,k80:6x4; the Alibaba days 130-134: k80:6x8,p100:6x2,v100:1x4).
# COSTS: restart costs in seconds (default 0 120 300). For each window and cost:
# Gavel's max_min_fairness, --restart-aware, and restart-aware + --moldable with the
# least-first count (n/2..2n and n/2..4n) and with the joint LP (--moldable-lp: n/2..2n,
# n/2..4n, n..2n), two simulations at a time; then one table row per run, the ratio
# against Gavel at 120 s (run 120 among the costs to get it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"
cluster=$2
shift 2
windows=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do windows+=("$1"); shift; done
costs=(0 120 300)
if [ $# -gt 1 ]; then shift; costs=("$@"); fi
py="$here/.venv/bin/python"
declare -A flags=(
  [gavel]=""
  [ra]="--restart-aware"
  [old]="--restart-aware --moldable"
  [oldw]="--restart-aware --moldable --moldable-grow 4"
  [lp]="--restart-aware --moldable --moldable-lp"
  [lpw]="--restart-aware --moldable --moldable-lp --moldable-grow 4"
  [lpup]="--restart-aware --moldable --moldable-lp --moldable-up-only"
)
order=(gavel ra old oldw lp lpw lpup)
jobs="$out/jobs.txt"
: >"$jobs"
for w in "${windows[@]}"; do
  name=$(basename "$w" .csv)
  for c in "${costs[@]}"; do
    for t in "${order[@]}"; do
      line="$out/$name-$t-$c.json $w $c ${flags[$t]}"
      echo "${line% }" >>"$jobs" # no trailing blank: xargs -L would join the next line
    done
  done
done
run_one() {
  local json=$1 trace=$2 cost=$3
  shift 3
  "$py" -m slurm_gavel simulate --trace "$trace" --policy max_min_fairness \
    --cluster "$CLUSTER" --preemption-overhead "$cost" "$@" --no-wall-time --no-progress \
    --json "$json" >"${json%.json}.txt" 2>&1 || echo "FAILED: $json" >&2
}
export -f run_one
export py CLUSTER="$cluster"
xargs -P 2 -L 1 bash -c 'run_one "$@"' _ <"$jobs"
"$py" - "$out" "${order[@]}" <<'EOF'
import json, sys
from pathlib import Path
out, order = Path(sys.argv[1]), sys.argv[2:]
print("| window | restart | run | avg JCT h | p99 JCT h | makespan h | restarts/job "
      "| GPU-h lost | Gavel@120 s / this | (re)starts by GPU count |")
for f in sorted(out.glob("*-gavel-*.json")):
    name, cost = f.stem.rsplit("-gavel-", 1)
    base = out / f"{name}-gavel-120.json"
    g = json.loads(base.read_text())["avg_jct_s"] if base.exists() else None
    for t in order:
        p = out / f"{name}-{t}-{cost}.json"
        if not p.exists():
            continue
        d = json.loads(p.read_text())
        by = " ".join(f"{k}:{v}" for k, v in (d.get("moldable") or {}).get("starts_by_count", {}).items())
        ratio = f"{g / d['avg_jct_s']:.2f}x" if g else ""
        print(f"| {name} | {cost} s | {t} | {d['avg_jct_s'] / 3600:.2f} | {d['p99_jct_s'] / 3600:.1f} "
              f"| {d['makespan_s'] / 3600:.1f} | {d['restarts_per_job']:.2f} "
              f"| {d['restart_gpu_hours']:.1f} | {ratio} | {by} |")
EOF
