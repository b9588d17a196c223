"""The time-sliced GPUs' per-tick split (`sources.shared_devices_query`) taken from their raw
samples, read once per batch, instead of asked of Prometheus.

Prometheus evaluates the split's expression at every scrape tick of every interval, series by
series, whatever the samples: on the day of a real cluster (`benchmarks/real_trace.py`, ten of
96 GPUs shared all day) it was two thirds of the ingest's evaluation for 4% of the samples.
Here the three metrics' samples of the GPUs in question come in three requests a batch
(`measure._Runner.samples`) and each tick is split as the expression splits it. The answer
has the expression's shape, labels and texts (Prometheus' `'f'` formatting), so
`measure._parse_shared` reads either; tests/metering/test_shared_split.py holds the two to the
same facts on real Prometheus answers, the simulated week, the real day and hand-made edges.

What the expression does at each tick p (a multiple of the scrape interval; the tick's sample
of a series is its last in [p, p + scrape), `QueryPlan.tick_slot`):
- a pod's series of a device is one, whichever spelling and target (`max`, NaN giving way to
  any number): `exported_pod` moved to `pod`, `exported_namespace` to `namespace` where set;
  a plain series of an exporter's own pod is none;
- allocation: 1/k to each of the k pods whose frame-buffer series the device has at p, +Inf
  where that sample is NaN or negative (`>= bool 0` is 0, and 0^-1 is +Inf);
- busy: a pod's engine activity / the device's pods with one at p; else its utilisation / 100,
  / 1 where the device's bare utilisation series stands beside it at p (its pods' figures are
  their own), / the pods with a utilisation series at p otherwise;
- present: the ticks at which any frame-buffer series of the GPU (bare, any pod, any device)
  has a sample;
- seen and the mean frame buffer (where asked): the ticks of a pod's merged series and the mean
  of its per-tick values.
Each part is summed over the ticks of an interval [S, S + step) and answered at S + step, as
`sum_over_time(...[step:scrape])` answers it. Windows are aligned to the step and the scrape
interval divides it, so every tick's slot lies in the interval of its tick: the batch's
samples hold every tick of the batch, and no other.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from kernel.numbers import exact_sum
from metering import sample_texts, sources

FRAME_BUFFER = "DCGM_FI_DEV_FB_USED"
ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"
METRICS = (FRAME_BUFFER, ACTIVE, UTILIZATION)

# (UUID, GPU_I_ID, GPU_I_PROFILE, namespace, pod): a pod's series of a device, in one spelling
# (sources.DEVICE_POD_LABELS); the output's labels, in that order.
Holder = tuple[str, str, str, str, str]
HOLDER_LABELS = ("UUID", "GPU_I_ID", "GPU_I_PROFILE", "namespace", "pod")
Device = tuple[str, str]  # (UUID, GPU_I_ID): whose holders share a tick
# Per tick (ms since the epoch), per holder: its value's text at that tick.
PerTick = dict[int, dict[Holder, str]]
# Each series' labels and its samples by tick: the text of its last sample in the tick's slot.
Slotted = list[tuple[Mapping[str, str], dict[int, str]]]


def selectors(plan: sources.QueryPlan, uuids: Iterable[str]) -> dict[str, str]:
    """The three metrics' series of these GPUs, every one (bare, pods', exporters' own): which
    of them the expression reads is told from their labels (`_holder`, `_bare_ticks`)."""
    only = sources.label_matcher("UUID", sources.regex_alternatives(uuids), "=~")
    return {metric: sources.selector(plan, metric, only) for metric in METRICS}


def split(
    samples: Mapping[str, Sequence[sources.Series]],
    plan: sources.QueryPlan,
    *,
    seen: bool,
    exporters: Iterable[str],
) -> list[sources.Series]:
    """The series `sources.shared_devices_query` answers over the intervals the samples
    cover, from each metric's raw samples (`selectors`), in Prometheus' order."""
    own = frozenset(exporters)
    scrape_ms = plan.scrape_seconds * 1000
    frame_buffers, activities, utilisations = (
        [(one.labels, _last_per_slot(one.values, scrape_ms)) for one in samples[metric]]
        for metric in METRICS
    )
    held = _per_tick(frame_buffers, own)
    active = _per_tick(activities, own)
    utilization = _per_tick(utilisations, own)
    beside = _bare_ticks(utilisations, own)
    step = plan.step_seconds
    # Per part, holder and interval end: how many ticks gave each (value's text, divisor).
    # A holder's ticks repeat a few of them (1/k of a tick, the engine's copy of the
    # device's activity / k), so each interval's sum is a few exact products, not a
    # rational added per tick.
    ticks: dict[tuple[str, Holder, int], dict[tuple[str, int], int]] = defaultdict(
        lambda: defaultdict(int)
    )
    for at, holders in held.items():
        end = _end_of(at, step)
        for holders_of in _by_device(holders).values():
            share = ("1", len(holders_of))
            for holder in holders_of:
                tick = share if _at_least_zero(holders[holder]) else INFINITE
                ticks[("alloc", holder, end)][tick] += 1
    for at in active.keys() | utilization.keys():
        end = _end_of(at, step)
        engines, own_figures = active.get(at, {}), utilization.get(at, {})
        for holders_of in _by_device(engines).values():
            for holder in holders_of:
                ticks[("busy", holder, end)][(engines[holder], len(holders_of))] += 1
        for device, holders_of in _by_device(own_figures).items():
            k = 1 if (at, device) in beside else len(holders_of)
            for holder in holders_of:
                if holder not in engines:
                    ticks[("busy", holder, end)][(own_figures[holder], 100 * k)] += 1
    sums: dict[tuple[str, Holder], dict[int, str]] = defaultdict(dict)
    for (meter, holder, end), counted in ticks.items():
        sums[(meter, holder)][end] = _sum_of(tuple(counted.items()))
    answered = [
        _series({**_labels(holder), "meter": meter}, by_end)
        for (meter, holder), by_end in sums.items()
    ]
    answered += _present(frame_buffers, step)
    if seen:
        answered += _seen(held, step)
    answered.sort(key=lambda series: sorted(series.labels.items()))
    return answered


def _per_tick(series: Slotted, own: frozenset[str]) -> PerTick:
    """Each holder's value at each tick: the last sample of each of its series in the tick's
    slot, the largest of those where several series are one holder's (`max`: NaN gives way)."""
    found: dict[int, dict[Holder, list[str]]] = defaultdict(lambda: defaultdict(list))
    for labels, slots in series:
        holder = _holder(labels, own)
        if holder is None:
            continue
        for at, text in slots.items():
            found[at][holder].append(text)
    return {
        at: {holder: sample_texts.max_text(texts) for holder, texts in holders.items()}
        for at, holders in found.items()
    }


def _holder(labels: Mapping[str, str], own: frozenset[str]) -> Holder | None:
    """The pod series `sources.pod_series` selects, in one spelling; None for the rest."""
    pod = labels.get("exported_pod", "")
    namespace = labels.get("namespace", "")
    if pod:
        namespace = labels.get("exported_namespace") or namespace
    else:
        pod = labels.get("pod", "")
        if not pod or pod in own:
            return None
    return (
        labels.get("UUID", ""),
        labels.get("GPU_I_ID", ""),
        labels.get("GPU_I_PROFILE", ""),
        namespace,
        pod,
    )


def _bare_ticks(series: Slotted, own: frozenset[str]) -> set[tuple[int, Device]]:
    """(tick, device) where the device's bare utilisation series (no pod, or an exporter's
    own) has a sample: its pods' utilisation series are their own figures there."""
    found: set[tuple[int, Device]] = set()
    for labels, slots in series:
        if labels.get("exported_pod") or labels.get("pod", "") not in own | {""}:
            continue
        device = (labels.get("UUID", ""), labels.get("GPU_I_ID", ""))
        found.update((at, device) for at in slots)
    return found


def _present(series: Slotted, step: int) -> list[sources.Series]:
    """Per GPU, the ticks of each interval at which any of its frame-buffer series had one."""
    ticks: dict[str, set[int]] = defaultdict(set)
    for labels, slots in series:
        ticks[labels.get("UUID", "")].update(slots)
    answered = []
    for uuid, at in ticks.items():
        counts: dict[int, int] = defaultdict(int)
        for tick in at:
            counts[_end_of(tick, step)] += 1
        labels = {"UUID": uuid, "meter": "present"} if uuid else {"meter": "present"}
        answered.append(_series(labels, {end: str(count) for end, count in counts.items()}))
    return answered


def _seen(held: PerTick, step: int) -> list[sources.Series]:
    """Per holder, the ticks of each interval with its merged frame-buffer series, and that
    series' mean over them."""
    texts: dict[Holder, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
    for at, holders in held.items():
        for holder, text in holders.items():
            texts[holder][_end_of(at, step)].append(text)
    answered = []
    for holder, by_end in texts.items():
        labels = _labels(holder)
        answered.append(
            _series({**labels, "meter": "seen"}, {end: str(len(t)) for end, t in by_end.items()})
        )
        answered.append(
            _series(
                {**labels, "meter": "memory_avg"},
                {end: sample_texts.mean_text(t) for end, t in by_end.items()},
            )
        )
    return answered


def _last_per_slot(values: Sequence[Sequence], scrape_ms: int) -> dict[int, str]:
    """The tick (ms) of each sample's slot -> the text of its last sample (in time order)."""
    found: dict[int, str] = {}
    for at, text in values:
        found[round(float(at) * 1000) // scrape_ms * scrape_ms] = text
    return found


def _end_of(at: int, step: int) -> int:
    """The end of the interval that holds the tick `at` (ms): where its sums are answered."""
    return at // 1000 // step * step + step


def _by_device(holders: Iterable[Holder]) -> dict[Device, list[Holder]]:
    found: dict[Device, list[Holder]] = defaultdict(list)
    for holder in holders:
        found[holder[:2]].append(holder)
    return found


def _labels(holder: Holder) -> dict[str, str]:
    return {name: value for name, value in zip(HOLDER_LABELS, holder, strict=True) if value}


def _series(labels: dict[str, str], by_end: dict[int, str]) -> sources.Series:
    return sources.Series(labels=labels, values=[[end, by_end[end]] for end in sorted(by_end)])


# A tick whose frame-buffer reading is NaN or negative: its share is +Inf (1/0).
INFINITE = ("+Inf", 1)


@lru_cache(maxsize=4096)
def _sum_of(counted: tuple[tuple[tuple[str, int], int], ...]) -> str:
    """The text of the sum of each value / its divisor, as many times as counted: most
    holders' intervals are one of a few (a whole interval at 1/2, 1/3 of a tick). NaN and
    infinities as Prometheus adds them."""
    values = [(Decimal(text), divisor, count) for (text, divisor), count in counted]
    special = [value for value, _, _ in values if not value.is_finite()]
    if special:
        return sample_texts.special_text(special)
    return _go_text(
        exact_sum(Fraction(value) * count / divisor for value, divisor, count in values)
    )


@lru_cache(maxsize=4096)
def _at_least_zero(text: str) -> bool:
    """Whether a frame-buffer reading counts as held (`>= bool 0`); readings repeat."""
    value = Decimal(text)  # "NaN", "+Inf" and "-Inf" read as Decimal's own
    return not value.is_nan() and value >= 0


def _go_text(value: Fraction | int) -> str:
    """A float's text as Prometheus writes it (Go's `'f'`, shortest digits that read back the
    same float): the exact value rounded to a float first, as Prometheus' own sum would be."""
    number = float(value)
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    text = format(Decimal(repr(number)), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text or "0"
