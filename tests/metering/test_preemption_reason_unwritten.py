"""When the count of reasons written at 0 is asked (sources.reasons_at_zero_query), and what a
window whose kube-state-metrics cannot show preemptions says, on hand-made observations.
tests/metering/test_kube_state_metrics_releases.py meters the three releases end to end."""

from __future__ import annotations

from metering import measure, sources
from metering.measure import Observed, PodIdentity
from metering.models import Source

STEP = 300
PLAN = sources.query_plan_for(
    Source(name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60), step_seconds=STEP
)
POD = ("ml", "train-0")


def interval(*, pods: bool = True, reason_series: int = 0) -> Observed:
    observed = Observed(preemption_reason_series=reason_series)
    if pods:
        observed.identity[POD] = PodIdentity(from_kube=True)
    return observed


def batch(*intervals: Observed) -> dict[int, Observed]:
    """The interval before the batch, then the batch's."""
    return {STEP * n: observed for n, observed in enumerate(intervals)}


def test_it_asks_when_an_interval_shows_pods_and_no_series_of_the_reason() -> None:
    assert measure._reason_unwritten(batch(interval(), interval(reason_series=1), interval()))


def test_it_never_asks_while_every_interval_has_series_of_the_reason() -> None:
    # kube-state-metrics v2.19 (and the simulator's default): a series per pod, 0 or 1.
    assert not measure._reason_unwritten(batch(interval(), interval(reason_series=1)))


def test_it_never_asks_of_intervals_that_show_no_pod() -> None:
    # An empty pool, or kube-state-metrics silent (its gap warns of unseen preemptions).
    assert not measure._reason_unwritten(batch(interval(), interval(pods=False)))


def test_it_never_asks_for_the_interval_before_the_batch() -> None:
    assert not measure._reason_unwritten(batch(interval(), interval(reason_series=2)))


def test_it_says_why_a_window_shows_no_preemptions_naming_the_reason() -> None:
    observed = batch(interval(), interval())
    observed[STEP].preemptions_unreadable = True
    facts = measure._derive(observed[STEP], observed[0], PLAN, set(), {}, {}, {}, {}, {})
    assert facts.preemptions_unreadable
    assert facts.warnings == [
        "preemptions: kube-state-metrics writes no kube_pod_status_reason series for reason"
        ' "PreemptionByScheduler" while it writes the other reasons at 0, as its releases'
        " before v2.19.0 do: no preemption in this window can be seen, nor any starvation"
        " credit (pricing rule 5) paid for one; upgrade kube-state-metrics (or correct the"
        " source's preemption_reason)"
    ]


def test_it_asks_for_the_reasons_written_at_zero_within_the_sources_matchers() -> None:
    source = Source(
        name="pool",
        url="http://127.0.0.1:9",
        scrape_interval_seconds=60,
        label_mapping={"matchers": {"cluster": "prod"}},
    )
    plan = sources.query_plan_for(source, step_seconds=STEP)
    assert sources.reasons_at_zero_query(plan) == (
        f'count(last_over_time(kube_pod_status_reason{{reason="Evicted",cluster="prod"}}'
        f"{plan.window}) == 0)"
    )


def test_it_benchmarks_the_queries_ingest_sends() -> None:
    """benchmarks/_reasons_probe.py runs without Django, so it writes the queries out: they
    must stay the ones a source with the default mapping sends (its 5-minute step)."""
    from benchmarks import _reasons_probe

    plan = sources.query_plan_for(
        Source(name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60),
        step_seconds=_reasons_probe.STEP,
    )
    queries = list(_reasons_probe.QUERIES.values())
    assert queries[0] == sources.reasons_at_zero_query(plan)
    assert queries[1] == sources.identity_parts(plan)["preempted"].promql
