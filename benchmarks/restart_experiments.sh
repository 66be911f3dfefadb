#!/usr/bin/env bash
# Restart-aware rounds against Gavel on public traces (EXPERIMENTS.md
# "Restart-aware rounds on real traces"). The traces are not shipped: fetch
#   https://github.com/siasosp23/artifacts    sia-simulator/traces/philly.csv
#   https://github.com/alibaba/clusterdata    cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv
#                                             cluster-trace-gpu-v2023/csv/openb_node_list_gpu_node.csv
# Usage: bash benchmarks/restart_experiments.sh PHILLY_CSV ALIBABA_PODS ALIBABA_NODES OUT
# Writes OUT/<window>/{gavel,aware}_<cost>.json (max_min_fairness and slurm_fifo in
# gavel_*, the restart-aware max_min_fairness in aware_*) and prints one table.
set -euo pipefail
philly=$1; pods=$2; nodes=$3; out=$4
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sg() { "$here/.venv/bin/python" -m slurm_gavel "$@"; }
mkdir -p "$out"
sg trace philly "$philly" --start "2017-10-17 00:00" --hours 12 -o "$out/philly-1017.csv"
sg trace philly "$philly" --start "2017-10-05 00:00" --hours 12 -o "$out/philly-1005.csv"
# held out while restart-aware rounds' rules were chosen (EXPERIMENTS.md)
sg trace philly "$philly" --start "2017-10-10 00:00" --hours 12 -o "$out/philly-1010.csv"
sg trace philly "$philly" --start "2017-10-24 00:00" --hours 12 -o "$out/philly-1024.csv"
# three more Philly days, added when the rules were judged over a budget neighbourhood
# (EXPERIMENTS.md, "Where it stands"; benchmarks/restart_neighbourhood.py)
for day in 12 20 22; do
  sg trace philly "$philly" --start "2017-10-$day 00:00" --hours 12 -o "$out/philly-10$day.csv"
done
sg trace alibaba "$pods" --nodes "$nodes" --scale 0.01 --start 11232000 --hours 96 \
  --cluster-out "$out/ali-130.cluster" -o "$out/ali-130.csv"
# two more Alibaba windows, chosen by pod count before any was simulated (EXPERIMENTS.md):
# days 122-126 (the busiest 96 h window but 130's) and 142-146 (the median one)
for day in 122 142; do
  sg trace alibaba "$pods" --nodes "$nodes" --scale 0.01 --start $((day * 86400)) --hours 96 \
    -o "$out/ali-$day.csv"
done
run_window() {  # name cluster
  local name=$1 cluster=$2 d="$out/$1"
  mkdir -p "$d"
  for cost in 0 120 300; do
    sg simulate --no-progress --no-wall-time --trace "$out/$name.csv" --cluster "$cluster" \
      --preemption-overhead "$cost" --policy max_min_fairness --policy slurm_fifo \
      --json "$d/gavel_$cost.json" >/dev/null
    sg simulate --no-progress --no-wall-time --trace "$out/$name.csv" --cluster "$cluster" \
      --preemption-overhead "$cost" --policy max_min_fairness --restart-aware \
      --json "$d/aware_$cost.json" >/dev/null
  done
}
run_window philly-1017 v100:6x4,p100:6x4,k80:6x4
run_window philly-1005 v100:6x4,p100:6x4,k80:6x4
run_window philly-1010 v100:6x4,p100:6x4,k80:6x4
run_window philly-1024 v100:6x4,p100:6x4,k80:6x4
run_window philly-1012 v100:6x4,p100:6x4,k80:6x4
run_window philly-1020 v100:6x4,p100:6x4,k80:6x4
run_window philly-1022 v100:6x4,p100:6x4,k80:6x4
run_window ali-130 "$(cat "$out/ali-130.cluster")"
run_window ali-122 "$(cat "$out/ali-130.cluster")"  # the same node list, so the same cluster
run_window ali-142 "$(cat "$out/ali-130.cluster")"
"$here/.venv/bin/python" - "$out" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
print(f"{'window':<12} {'run':<36} {'avg JCT h':>9} {'p99 h':>8} {'makespan h':>10} "
      f"{'restarts':>8} {'per job':>7} {'lost GPU-h':>10}")
for w in ("philly-1017", "philly-1005", "philly-1010", "philly-1024", "philly-1012", "philly-1020",
          "philly-1022", "ali-130", "ali-122", "ali-142"):
    for cost in (0, 120, 300):
        for kind in ("gavel", "aware"):
            doc = json.loads((out / w / f"{kind}_{cost}.json").read_text())
            for s in doc if isinstance(doc, list) else [doc]:
                name = ("restart-aware " if kind == "aware" else "") + s["policy"]
                print(f"{w:<12} {name + f' @{cost}s':<36} {s['avg_jct_s'] / 3600:9.2f} "
                      f"{s['p99_jct_s'] / 3600:8.2f} {s['makespan_s'] / 3600:10.2f} "
                      f"{s['preemptions']:8d} {s['restarts_per_job']:7.2f} "
                      f"{s['restart_gpu_hours']:10.1f}")
PY
