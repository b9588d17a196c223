import filecmp
from dataclasses import replace

from simulator.pool import simulate


def test_it_writes_the_same_files_for_the_same_seed(small_pool, tmp_path):
    again = simulate(small_pool.config, tmp_path)

    assert filecmp.cmp(again.metrics_path, small_pool.result.metrics_path, shallow=False)
    assert filecmp.cmp(again.truth_path, small_pool.result.truth_path, shallow=False)


def test_it_writes_different_files_for_another_seed(small_pool, tmp_path):
    other = simulate(replace(small_pool.config, seed=small_pool.config.seed + 1), tmp_path)

    assert not filecmp.cmp(other.metrics_path, small_pool.result.metrics_path, shallow=False)
    assert not filecmp.cmp(other.truth_path, small_pool.result.truth_path, shallow=False)
