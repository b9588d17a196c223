"""PromQL building: escaping, the source's mapping, and the exactness rules in the text."""

from __future__ import annotations

import re
import subprocess
from dataclasses import replace
from fractions import Fraction

import pytest

from metering import measure, sources
from metering.models import Source


def plan_for(**fields) -> sources.QueryPlan:
    return sources.query_plan_for(Source(name="s", url="http://x", **fields), step_seconds=300)


@pytest.mark.parametrize(
    ("value", "escaped"),
    [
        ('we"ird', 'we\\"ird'),
        ("back\\slash", "back\\\\slash"),
        ("new\nline", "new\\nline"),
        ('\\"', '\\\\\\"'),
    ],
)
def test_it_escapes_label_values(value, escaped) -> None:
    assert sources.escape_label_value(value) == escaped
    assert sources.label_matcher("cluster", value) == f'cluster="{escaped}"'


def test_it_matches_exactly_the_named_values_in_a_regex() -> None:
    alternatives = sources.regex_alternatives(["a.b", "c|d", "GPU-1+2"])
    assert alternatives == "GPU-1\\+2|a\\.b|c\\|d"
    assert re.fullmatch(alternatives, "a.b") and re.fullmatch(alternatives, "c|d")
    assert not re.fullmatch(alternatives, "axb") and not re.fullmatch(alternatives, "c")


def test_it_counts_each_tick_once_with_a_window_one_millisecond_short() -> None:
    # Evaluated at S + step, 1 ms earlier: a closed range (Prometheus 2.x) of step - 1 ms
    # holds [S, S + step - 1ms]; a left-open one (3.x) needs the whole step for the same.
    plan = plan_for(scrape_interval_seconds=15)
    assert plan.window == "[299999ms] offset 1ms"
    assert plan.ticks_window == "[299999ms:15s] offset 1ms"
    left_open = replace(plan, closed_ranges=False)
    assert left_open.window == "[300000ms] offset 1ms"
    # At each point p of the subquery, the tick's sample in [p, p + 15 s), wherever in it
    # Prometheus scraped (tests/metering/test_scrape_offsets.py).
    assert plan.tick_slot == "[14999ms] offset -14999ms"
    assert left_open.tick_slot == "[15000ms] offset -14999ms"
    for build in sources.METERS.values():
        promql = build(plan)
        assert "[299999ms] offset 1ms" in promql and "[5m]" not in promql
        assert "[300000ms] offset 1ms" in build(left_open)


@pytest.mark.slow
def test_it_asks_the_server_whether_its_ranges_hold_their_start(edge_prometheus) -> None:
    client = sources.PrometheusClient(url=edge_prometheus.url)
    try:
        # Debian's Prometheus is 2.x: ranges hold both ends.
        assert edge_prometheus_version().startswith("2.")
        assert client.ranges_closed() is True
    finally:
        client.close()


def edge_prometheus_version() -> str:
    output = subprocess.run(
        ["prometheus", "--version"], capture_output=True, text=True, check=True
    ).stdout
    return output.split("version ", 1)[1].split()[0]


def test_it_adds_the_sources_matchers_to_every_selector() -> None:
    plan = plan_for(label_mapping={"matchers": {"cluster": 'a"b'}})
    promql = sources.devices_query(plan)
    selectors = re.findall(r"DCGM_FI_DEV_FB_USED\{[^}]*\}", promql)
    assert selectors and all('cluster="a\\"b"' in s for s in selectors)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"label_mapping": {"task_label": "label task"}}, "label_mapping.task_label"),
        ({"label_mapping": {"matchers": {"bad name": "x"}}}, "label_mapping.matchers"),
        ({"label_mapping": {"latency_histogram": "vllm e2e"}}, "label_mapping.latency_histogram"),
        ({"label_mapping": {"nonsense": 1}}, "unknown keys: nonsense"),
        ({"label_mapping": {"unmetered_nodes": "team-b-("}}, "label_mapping.unmetered_nodes"),
        ({"label_mapping": {"unmetered_nodes": 3}}, "label_mapping.unmetered_nodes"),
        (
            {"label_mapping": {"latency_unmeasured_tasks": "batch/("}},
            "label_mapping.latency_unmeasured_tasks",
        ),
        ({"priority_class_kinds": ["inference"]}, "priority_class_kinds"),
        ({"priority_class_kinds": {"gold": "gaming"}}, "priority_class_kinds"),
        ({"scrape_interval_seconds": 7}, "scrape_interval_seconds"),
    ],
)
def test_it_refuses_an_unusable_mapping_naming_the_field(fields, named) -> None:
    with pytest.raises(sources.SourceConfigurationError, match=re.escape(named)):
        plan_for(**fields)


@pytest.mark.parametrize(
    ("profile", "share"),
    [("", Fraction(1)), ("3g.40gb", Fraction(3, 7)), ("1g.10gb", Fraction(1, 7)), ("7g.80gb", 1)],
)
def test_it_counts_a_mig_instance_as_slices_of_seven(profile, share) -> None:
    assert measure.mig_share(profile) == share
    assert measure.mig_share(profile, "NVIDIA H100 80GB HBM3") == share


@pytest.mark.parametrize(
    ("profile", "model", "share"),
    [
        ("1g.6gb", "NVIDIA A30", Fraction(1, 4)),
        ("1g.6gb+me", "NVIDIA A30", Fraction(1, 4)),
        ("4g.24gb", "NVIDIA A30", 1),
        ("2g.48gb", "NVIDIA RTX PRO 6000 Blackwell Server Edition", Fraction(1, 2)),
        ("2g.48gb", "NVIDIA RTX PRO 5000 Blackwell", 1),
        ("", "NVIDIA A30", 1),
    ],
)
def test_it_counts_a_mig_instance_as_slices_of_its_models_gpu(profile, model, share) -> None:
    # NVIDIA's MIG user guide: an A30 and an RTX PRO 6000 Blackwell have four slices.
    assert measure.mig_share(profile, model) == share
    assert measure.mig_parts(profile, model) == share * measure.SHARE_PARTS


def test_it_refuses_a_mig_profile_larger_than_its_models_gpu() -> None:
    with pytest.raises(ValueError, match=re.escape("7g.80gb")):
        measure.mig_share("7g.80gb", "NVIDIA A30")


@pytest.mark.parametrize(
    ("le", "canonical"),
    [("1.0", "1"), ("1", "1"), ("0.25", "0.25"), ("1e1", "10"), ("+Inf", "+Inf")],
)
def test_it_spells_every_bucket_bound_one_way(le, canonical) -> None:
    assert measure.canonical_le(le) == canonical


def test_it_recovers_exact_thirds_from_prometheus_floats() -> None:
    assert measure.exact("6.666666666666667") == Fraction(20, 3)
    assert measure.exact("14.5") == Fraction(29, 2)
