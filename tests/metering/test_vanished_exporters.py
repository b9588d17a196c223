"""A GPU exporter that leaves no trace, `up` included, on a node kube-state-metrics still lists:
its GPUs are missing, not gone, on hand-made observations. Before, they counted as a removed
node's: the pool's capacity (and with it the inference reservation, 30% of it) shrank and every
window was complete. tests/metering/test_vanished_exporters_pool.py meters such a pool end to
end."""

from __future__ import annotations

from fractions import Fraction

from metering import measure, sources
from metering.measure import GpuInfo, Observed, PodIdentity
from metering.models import Source
from tests.metering.test_unattributed import unmetered_plan

STEP = 300
TICKS = 5
PLAN = sources.query_plan_for(
    Source(name="pool", url="http://127.0.0.1:9", scrape_interval_seconds=60), step_seconds=STEP
)
STAYS = ("dcgm-exporter", "10.42.0.11:9400")  # gpu-a's exporter, there throughout
LEAVES = ("dcgm-exporter", "10.42.0.12:9400")  # gpu-b's


def interval(*, b_reports: bool = True, listed: tuple[str, ...] = ("gpu-a", "gpu-b")) -> Observed:
    """gpu-a and gpu-b with two GPUs each; gpu-b's exporter reporting them (and recorded in
    `up`) or leaving no trace at all; kube-state-metrics listing `listed`."""
    observed = Observed()
    exporters = [(STAYS, "gpu-a")] + ([(LEAVES, "gpu-b")] if b_reports else [])
    for target, node in exporters:
        for n in range(2):
            observed.gpus[f"{node}-{n}"] = GpuInfo(ticks=TICKS, target=target, node=node)
        observed.targets[target] = [TICKS, TICKS]
    observed.gpu_nodes = set(listed)
    return observed


def batch(*intervals: Observed) -> dict[int, Observed]:
    """The interval before the batch, then the batch's."""
    return {STEP * n: observed for n, observed in enumerate(intervals)}


def completeness(observed: dict[int, Observed], plan: sources.QueryPlan = PLAN) -> list:
    """Each interval's (seen, expected) samples, as derive counts them."""
    facts = measure.derive(measure.Observation(observed, set(), [], 0.0), plan, STEP, max(observed))
    return [(f.samples_seen, f.samples_expected) for f in facts.intervals.values()]


def looked_back(before: Observed) -> None:
    """gpu-b's GPUs as sources.node_devices_query finds them."""
    for n in range(2):
        before.node_gpus[f"gpu-b-{n}"] = GpuInfo(target=LEAVES, node="gpu-b")


def test_it_counts_the_gpus_of_a_listed_node_whose_exporter_left_no_trace_missing() -> None:
    observed = batch(interval(), interval(), interval(b_reports=False), interval(b_reports=False))
    assert completeness(observed) == [(20, 20), (10, 20), (10, 20)]
    facts = measure.derive(measure.Observation(observed, set(), [], 0.0), PLAN, STEP, 3 * STEP)
    named = [w for w in facts.intervals[3 * STEP].warnings if w.startswith("completeness:")]
    assert named == [
        "completeness: node gpu-b (dcgm-exporter 10.42.0.12:9400) missing 2 GPU(s):"
        " gpu-b-0 300 s, gpu-b-1 300 s; no sample of its exporter, `up` included, while"
        " kube-state-metrics lists the node (the exporter's target gone from Prometheus, or"
        " its samples late)"
    ]
    # Capacity is what was seen: the missing part is flagged, not invented.
    assert facts.intervals[2 * STEP].capacity[""] == 2 * TICKS * 60


def test_it_counts_a_node_that_is_no_longer_listed_as_gone() -> None:
    gone = interval(b_reports=False, listed=("gpu-a",))
    observed = batch(interval(), interval(), gone, gone)
    assert completeness(observed) == [(20, 20), (10, 10), (10, 10)]


def test_it_counts_nothing_where_kube_state_metrics_lists_no_node() -> None:
    """A source whose kube-state-metrics does not write node series: as before."""
    silent = interval(b_reports=False, listed=())
    assert completeness(batch(interval(listed=()), interval(listed=()), silent)) == [
        (20, 20),
        (10, 10),
    ]


def test_it_leaves_an_exporter_prometheus_scraped_to_its_scrapes() -> None:
    """Recorded in `up` as answering without the GPUs: absent (capacity says so), as before;
    recorded as failing: the silent exporter's count, once."""
    answering = interval(b_reports=False)
    answering.targets[LEAVES] = [TICKS, TICKS]
    failing = interval(b_reports=False)
    failing.targets[LEAVES] = [TICKS, 0]
    assert completeness(batch(interval(), answering)) == [(10, 10)]
    assert completeness(batch(interval(), failing)) == [(10, 20)]


def test_it_counts_a_new_node_before_its_exporter_starts_as_nothing() -> None:
    """A node listed before its exporter's first sample has no GPUs known yet."""
    early = interval(b_reports=False)
    assert completeness(batch(early, early, interval())) == [(10, 10), (20, 20)]


def test_it_counts_a_node_looked_back_for_over_a_batch_inside_the_outage() -> None:
    """The node's GPUs, last seen before the batch, come from `node_devices_query`'s
    look-back, which lands on the interval before the batch."""
    before = interval(b_reports=False)
    looked_back(before)
    outage = interval(b_reports=False)
    observed = batch(before, outage, interval(b_reports=False))
    # Without it, the node is one to look up.
    unseen = measure._unreported_gpu_nodes(batch(interval(b_reports=False), outage), PLAN)
    assert list(unseen) == [(STEP, "gpu-b", None)]
    assert completeness(observed) == [(10, 20), (10, 20)]


def test_it_leaves_another_sources_nodes_and_a_replaced_exporter_alone() -> None:
    outage = interval(b_reports=False)
    assert completeness(batch(interval(), outage), unmetered_plan("gpu-b")) == [(10, 10)]
    # A new exporter pod (a new `instance`) reports the node's GPUs: nothing is missing.
    replaced = interval(b_reports=False)
    new_target = ("dcgm-exporter", "10.42.0.99:9400")
    for n in range(2):
        replaced.gpus[f"gpu-b-{n}"] = GpuInfo(ticks=TICKS, target=new_target, node="gpu-b")
    replaced.targets[new_target] = [TICKS, TICKS]
    assert completeness(batch(interval(), replaced)) == [(20, 20)]


def test_it_counts_a_vanished_nodes_running_pods_once() -> None:
    """Pods Running there with GPUs are in the node's missing GPUs, not counted again."""
    before, now = interval(), interval(b_reports=False)
    for observed in (before, now):
        observed.identity["ml", "trainer-0"] = PodIdentity(
            node="gpu-b", gpus_requested=Fraction(2), running=True, from_kube=True
        )
    assert completeness(batch(interval(), before, now)) == [(20, 20), (10, 20)]


def test_it_asks_prometheus_for_the_nodes_gpus_by_either_label_spelling() -> None:
    query = sources.node_devices_query(PLAN, ["gpu-b", "gpu.c"], 86_400)
    assert query == (
        "group by (UUID, GPU_I_ID, job, instance, Hostname, hostname) (last_over_time("
        'DCGM_FI_DEV_FB_USED{Hostname=~"gpu-b|gpu\\\\.c"}[86400s])) or group by (UUID, GPU_I_ID,'
        " job, instance, Hostname, hostname) (last_over_time(DCGM_FI_DEV_FB_USED{"
        'Hostname="",hostname=~"gpu-b|gpu\\\\.c"}[86400s]))'
    )
    parts = sources.targets_parts(PLAN)
    # The last sample in the interval: one at its end is the next interval's.
    window = PLAN.window
    assert parts["gpu_nodes"].queries == (
        f'last_over_time(kube_node_status_allocatable{{resource="nvidia_com_gpu"}}{window})',
        f'last_over_time(kube_node_status_allocatable{{resource=~"nvidia_com_mig_.+"}}{window})',
    )
    assert parts["node_leaving"].promql == (
        'last_over_time(kube_node_spec_taint{key=~"ToBeDeletedByClusterAutoscaler|karpenter'
        '\\\\.sh/disrupted|karpenter\\\\.sh/disruption|node\\\\.kubernetes\\\\.io/unschedulable"}'
        f"{window})"
    )


def test_it_forgets_the_gpus_of_a_machine_that_had_the_name_before() -> None:
    """gpu-b unlisted a while, then listed again, created anew, before its exporter's first
    sample: the GPUs seen by the end of an interval at or before its creation were the old
    machine's. Without creation times, being unlisted is what tells."""
    left = interval(b_reports=False, listed=("gpu-a",))
    for created, expected in ((STEP, (10, 20)), (2 * STEP, (10, 10))):
        new = interval(b_reports=False)
        new.node_created["gpu-b"] = created  # GPUs last seen by 2 * STEP (interval 1's end)
        left.node_created["gpu-a"] = 0
        observed = batch(interval(), interval(), left, new)
        assert completeness(observed) == [(20, 20), (10, 10), expected], created
    no_times = interval(b_reports=False, listed=("gpu-a",))
    assert completeness(batch(interval(), interval(), no_times, interval(b_reports=False))) == [
        (20, 20),
        (10, 10),
        (10, 10),
    ]


def test_it_keeps_a_node_a_listing_missed_once_where_creation_times_tell() -> None:
    """A kube-state-metrics shard that missed a scrape leaves gpu-b out of one listing: the
    same machine (created as before) is still counted, however the windows are batched."""
    missed = interval(b_reports=False, listed=("gpu-a",))
    missed.node_created["gpu-a"] = 0
    outage = interval(b_reports=False)
    outage.node_created.update({"gpu-a": 0, "gpu-b": 0})
    assert completeness(batch(interval(), interval(), missed, outage, outage)) == [
        (20, 20),
        (10, 10),
        (10, 20),
        (10, 20),
    ]


def test_it_looks_back_no_further_than_each_nodes_creation() -> None:
    before, now = interval(b_reports=False), interval(b_reports=False)
    now.node_created.update({"gpu-a": -86_400, "gpu-b": STEP - 2 * 86_400 - 59})
    now.node_created.update({"gpu-new": STEP + 10, "gpu-young": STEP - 150})
    nodes = {"gpu-a", "gpu-b", "gpu-new", "gpu-young", "x"}
    spans = measure._lookback_spans(batch(before, now), PLAN, nodes)
    # Down to the hour (under an hour, to the minute); at most 7 days, and 7 days where no
    # creation is known; created after the batch started: nothing to look for.
    assert spans == {
        86_400: {"gpu-a"},
        2 * 86_400: {"gpu-b"},
        120: {"gpu-young"},
        7 * 86_400: {"x"},
    }


def test_it_leaves_a_node_on_its_way_out_alone() -> None:
    """Cordoned, or marked for deletion by an autoscaler: its exporter may go first."""
    leaving = interval(b_reports=False)
    leaving.nodes_leaving.add("gpu-b")
    assert completeness(batch(interval(), interval(), leaving)) == [(20, 20), (10, 10)]


def test_it_still_counts_another_nodes_unreported_pods_beside_an_idle_vanished_node() -> None:
    """gpu-b idle and its exporter gone; gpu-c, listed too, with no exporter and a pod holding
    2 GPUs through the interval: both count missing (an idle vanished node once hid gpu-c's
    pod, taken for an exporter under an unknown name)."""
    before = interval(listed=("gpu-a", "gpu-b", "gpu-c"))
    now = interval(b_reports=False, listed=("gpu-a", "gpu-b", "gpu-c"))
    for observed in (before, now):
        observed.identity["ml", "on-c"] = PodIdentity(
            node="gpu-c", gpus_requested=Fraction(2), running=True, from_kube=True
        )
    assert completeness(batch(interval(), before, now)) == [(20, 20), (10, 30)]
