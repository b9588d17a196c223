"""Every synthetic pool the database tests write, one builder each, and their fixtures.

Builders (plain functions; they need the database):

- `build_api_pool()` (tests/pools/api.py): three teams alpha, bravo, charlie; twelve hours across
  local midnight, rows just outside that range, this month's usage and quotas, a closed
  2026-10 with statements, a draft book; it returns the raw records it wrote.
- `build_boundary_pool()` (tests/pools/boundary.py): 36 hours of 8 GPUs across the 2026-09 / 2026-10
  boundary in Asia/Shanghai, preemptions beyond the threshold, a GPU that drops out.
- `build_report_pool()` (tests/pools/reports.py): twelve hours of 4 GPUs in 2026-10 and two in
  2026-09; a team and tasks named like spreadsheet formulas, for the CSV escaping checks.
- `build_page_pool()` / `build_closed_page_pool()` (tests/pools/pages.py): days of 8 GPUs with daily
  shapes, for the pages; the closed one meters September and October and closes both.

Fixtures (tests/pools/fixtures.py, a plugin of tests/conftest.py, so every area has them):

- `api_pool`: `build_api_pool()` built once per test module, each test in a savepoint of it;
- `boundary_pool`, `report_pool` (closed by billing's own close): built for each test;
- `closed_pool` (tests/dashboards/conftest.py): `build_closed_page_pool()` once per module.

The simulated pools behind Prometheus (tests/metering, tests/simulator) are no database
pools: they come from `simulator.simulate` and stay with their areas' conftest.py.
"""
