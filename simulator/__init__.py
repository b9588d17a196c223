"""Tandem's pool simulator: realistic telemetry of a shared GPU pool, with its ground truth.

Pure Python (stdlib only, no Django), deterministic for a seed. Modules:

- `config`: `PoolConfig` (what to simulate, validated), `previous_calendar_month`.
- `layout`: nodes, GPUs and devices (whole GPUs, MIG instances, time-sliced GPUs).
- `workload`: tasks, pods and their kube-state-metrics series.
- `pool`: the engine (scheduler, controllers, exporters) and `simulate(config, out_dir)`,
  which writes `metrics.om` (OpenMetrics for `promtool`) and `truth.json`, both streamed (one
  tick and the live tasks in memory), up to 10,000 GPUs (`config.MAX_GPUS`).
- `truth`: the truth.json CONTRACT (read its docstring) and `load_truth`.
- `serve`: the same pool live at `/metrics` (`simulate_pool --serve PORT`).
- `prometheus`: `backfill`, `free_port`, `running_prometheus`, `start_prometheus`.
"""
