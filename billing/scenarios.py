"""Build a period's scenario (docs/pricing.md "Scenario files") straight from the metering tables.

A month of a 1,000-GPU pool is about 4 million usage rows, so usage is read packed per
interval by PostgreSQL and handed to the engine as its plain `(interval, task, alloc)` tuples,
with every repeated value (interval, task id) one shared Python object: no model instances,
no per-row dicts or datetimes. Latency histograms become the engine's `Latency` records
directly. The small parts (price book, tasks, services, capacity, preemptions) go through the
engine's own reader, `scenario_from_dict`, so they are validated as a scenario file would be.

Scenario ids: a task or service is named by its `external_id`; when two sources use the same
external id within the period, both are named `<source>/<external_id>` so ids stay unique.
Tasks that share a source and a name within the period (two namespaces' Jobs `trainer`, or one
key's rows under two teams after a relabel) are named `<source>/<namespace>/<name>`, then with
` (<team>)`. Only the tasks and services of the period count (services since builder 4), so a
month's ids never change with later months' tasks or services.

GPU classes (docs/pricing.md v2): the book's classes travel in `price_book.gpu_classes`.
Capacity and usage rows carry their GPU model (dcgm-exporter's `modelName`); each model goes
to the class of the book that lists it, else to `default`, and the rows of one interval (and
task) and class are summed. `default` is written without `gpu_class`, so a book without
classes gives version 1's scenario text and hash. A preemption carries the model of its
task's metered allocation (builder 3), classed the same way: its compensation is priced at
that class's rates (rule 5).

Builder versions: a closed month's scenario is re-built to verify it and to find late data,
so the builder's output for a closed month never changes. `SCENARIO_BUILDER_VERSION` is
stored on each close and the month is re-built as that version built it:
1. no `preemptions_before` (every task's count started with the period);
2. each task preempted in the period carries `preemptions_before`, its preemptions before the
   period start (docs/pricing.md "Preemptions across periods");
3. each preemption carries the GPU class of its recorded GPU model (builders 1 and 2 wrote
   every preemption in `default`);
4. a service is named apart by its source only where another source's service of the same
   external id has latency in the period too (builders 1 to 3 looked at every service ever
   metered, so a cluster added later, serving the same model, renamed a closed month's
   services, and its rebuild said the month's data had changed);
5. a class takes a GPU model by `kernel.gpu_models.gpu_model_key` (the "NVIDIA " prefix,
   whitespace and case aside): builders 1 to 4 took the exact name, so a node writing
   "H100 80GB HBM3" (an older driver) in a book listing "NVIDIA H100 80GB HBM3" was priced
   in `default`; a month they closed is re-built with the exact name, as it was priced.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import os
import queue
import signal
import tempfile
import threading
import traceback
import zlib
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from itertools import groupby
from operator import itemgetter

from django.conf import settings

from billing.models import PeriodScenario, PriceBook
from billing.pricing import (
    DEFAULT_CLASS,
    Latency,
    PricingResult,
    Scenario,
    ScenarioError,
    UsageRuns,
    canonical_json_parts,
    price,
    scenario_from_dict,
)
from kernel.collector import collector_paused
from kernel.gpu_models import gpu_model_key
from kernel.histogram import INFINITY, is_infinity
from metering import selectors as metering_selectors
from metering.models import Service, Task

ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
SCENARIO_BUILDER_VERSION = 5
# The first builder that matches GPU models to classes by `gpu_model_key`.
MODEL_KEY_BUILDER = 5


@dataclass(frozen=True)
class BuiltScenario:
    """A validated scenario and how its ids map back to metering rows."""

    scenario: Scenario
    task_pks: dict[str, int]  # scenario task id -> metering Task pk
    service_pks: dict[str, int]  # scenario service id -> metering Service pk

    # Capacity GPU-seconds by GPU model (as metered) that no class of a book with classes
    # takes: priced in `default` (`ModelClasses.unclassed`).
    unclassed_capacity: dict[str, Decimal] = dataclasses.field(default_factory=dict)

    @property
    def has_metering_data(self) -> bool:
        return bool(self.scenario.capacity or self.scenario.usage)


@dataclass(frozen=True)
class PricedScenario:
    """A scenario, its canonical text (compressed) and hash, and the engine's result for it."""

    built: BuiltScenario
    scenario_zlib: bytes  # canonical JSON as PeriodScenario stores it
    sha256: str
    result: PricingResult

    @property
    def text(self) -> str:
        """The canonical JSON: what export_scenario writes."""
        return zlib.decompress(self.scenario_zlib).decode()


@collector_paused
def scenario_digest(built: BuiltScenario) -> tuple[bytes, str]:
    """The canonical JSON text of `built`, compressed as PeriodScenario stores it, and its
    SHA-256 (equal to `scenario_hash`), both taken piece by piece: a month's text is
    hundreds of MB and is never held whole."""
    digest = hashlib.sha256()
    compressor = PeriodScenario.compressor()
    compressed: list[bytes] = []

    def take(data: bytes) -> None:
        digest.update(data)
        compressed.append(compressor.compress(data))

    _feed(built, take)
    compressed.append(compressor.flush())
    return b"".join(compressed), digest.hexdigest()


@collector_paused
def scenario_sha256(built: BuiltScenario) -> str:
    """`scenario_digest`'s hash alone (nothing compressed): to compare with a stored one."""
    digest = hashlib.sha256()
    _feed(built, digest.update)
    return digest.hexdigest()


DIGEST_BATCH_BYTES = 1 << 20  # encoded text handed to the digest thread at a time
DIGEST_QUEUE_BATCHES = 16  # batches written ahead of the thread that takes them


def _feed(built: BuiltScenario, take: Callable[[bytes], object]) -> None:
    """Each piece of the canonical text, encoded, to `take`, which runs on a thread of its
    own: SHA-256 and zlib release the GIL on large pieces, so on a second core they take a
    piece while this one writes the next (the text is ~420 MB at 1,000 GPUs). Pieces go
    over in batches of about a MB: each hand-over waits for the GIL."""
    batches: queue.Queue[list[bytes] | None] = queue.Queue(maxsize=DIGEST_QUEUE_BATCHES)
    failed: list[BaseException] = []

    def consume() -> None:
        try:
            while (batch := batches.get()) is not None:
                take(b"".join(batch))  # one call that releases the GIL per batch
        except BaseException as error:  # handed to the writer, which raises it
            failed.append(error)
            while batches.get() is not None:  # let the writer finish
                pass

    worker = threading.Thread(target=consume, name="scenario-digest", daemon=True)
    worker.start()
    batch: list[bytes] = []
    size = 0
    try:
        for part in canonical_json_parts(built.scenario):
            data = part.encode()
            batch.append(data)
            size += len(data)
            if size >= DIGEST_BATCH_BYTES:
                batches.put(batch)
                batch, size = [], 0
        batches.put(batch)
    finally:
        batches.put(None)
        worker.join()
    if failed:
        raise failed[0]


@collector_paused
def scenario_price(built: BuiltScenario, digest: tuple[bytes, str] | None = None) -> PricedScenario:
    """Compressed canonical text, SHA-256 and the engine's price of `built`: the digest taken
    in a forked process while this one prices (`TANDEM_SCENARIO_DIGEST_FORKED`)."""
    if digest is not None:
        return PricedScenario(
            built=built, scenario_zlib=digest[0], sha256=digest[1], result=price(built.scenario)
        )
    digest_wait = _digest_started(built)
    try:
        result = price(built.scenario)
    except BaseException:
        digest_wait(abandon=True)
        raise
    scenario_zlib, sha256 = digest_wait()
    return PricedScenario(built=built, scenario_zlib=scenario_zlib, sha256=sha256, result=result)


class ScenarioDigestError(RuntimeError):
    """The forked process that hashes and compresses a scenario failed (its traceback says why)."""


def _digest_started(built: BuiltScenario) -> Callable[..., tuple[bytes, str]]:
    """Start `scenario_digest(built)` in a forked child and return the call that waits for it
    (`abandon=True` stops it instead). The child shares the built scenario with this process
    (copy on write), touches neither the database nor anything else the parent holds, writes
    its result to an unnamed temporary file and leaves by `os._exit`, running none of the
    parent's exit handlers. Without fork, or with the setting off, the call digests here."""
    if not settings.TANDEM_SCENARIO_DIGEST_FORKED or not hasattr(os, "fork"):
        return lambda abandon=False: (b"", "") if abandon else scenario_digest(built)
    out = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            scenario_zlib, sha256 = scenario_digest(built)
            out.write(sha256.encode() + b"\n" + scenario_zlib)
            out.flush()
            code = 0
        except BaseException:
            out.write(b"!" + traceback.format_exc().encode())
            out.flush()
        finally:
            os._exit(code)

    def wait(abandon: bool = False) -> tuple[bytes, str]:
        if abandon:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        with out:
            out.seek(0)
            data = out.read()
        if abandon:
            return b"", ""
        if os.waitstatus_to_exitcode(status) != 0:
            reason = data[1:].decode(errors="replace")[-4000:] or f"wait status {status}"
            raise ScenarioDigestError(f"the scenario digest's process failed: {reason}")
        sha256, _, scenario_zlib = data.partition(b"\n")
        return scenario_zlib, sha256.decode()

    return wait


@collector_paused
def scenario_build(
    *,
    start: dt.datetime,
    end: dt.datetime,
    price_book: PriceBook,
    builder_version: int = SCENARIO_BUILDER_VERSION,
    slos: Mapping[int, int] | None = None,
    kinds: Mapping[int, str] | None = None,
) -> BuiltScenario:
    """The validated engine input for intervals starting in [start, end), with `price_book`,
    as builder `builder_version` wrote it (a closed month's is stored on its close); each
    service judged by its SLO in `slos` (by primary key: a closed month's), else its own;
    each task priced as its kind in `kinds` (by primary key: a closed month's), else its row's.

    Tasks and services are those that appear in the period's usage, preemptions or latency.
    Raises the engine's ScenarioError, naming the record, when metering holds data the rules
    cannot price (e.g. allocations above an interval's capacity).
    """
    all_tasks = list(
        Task.objects.filter(pk__in=_period_task_pks(start, end)).values_list(
            "pk", "external_id", "source__name", "team__name", "kind", "namespace"
        )
    )
    task_ids = _task_names(all_tasks)
    classes = gpu_classes_by_model(price_book, builder_version=builder_version)
    usage = _usage_rows(start, end, task_ids, classes)
    preemptions = _preemption_rows(
        start, end, task_ids, classes if builder_version >= 3 else ModelClasses({})
    )
    used = {row["task"] for row in preemptions}
    earlier = _preemptions_before(start, task_ids, preempted=used) if builder_version >= 2 else {}
    used.update(map(itemgetter(1), usage))
    histograms = metering_selectors.latency_histograms(start=start, end=end)
    all_services = Service.objects.values_list(
        "pk", "external_id", "source__name", "team__name", "slo_p99_ms"
    )
    if builder_version >= 4:
        all_services = all_services.filter(pk__in=[pk for pk, _ in histograms])
    all_services = list(all_services)
    service_ids = _unique_ids([(pk, ext, source) for pk, ext, source, *_ in all_services])
    latency = _latency_rows(histograms, service_ids)
    measured = {record.service for record in latency}
    unclassed: dict[str, Decimal] = {}  # filled by _capacity_rows
    small_parts = {
        "step_seconds": settings.TANDEM_STEP_SECONDS,
        "price_book": price_book.to_scenario_dict(),
        "tasks": [
            {"id": task_ids[pk], "team": team, "kind": (kinds or {}).get(pk, kind)}
            | ({"preemptions_before": earlier[pk]} if earlier.get(pk) else {})
            for pk, _, _, team, kind, _ in all_tasks
            if task_ids[pk] in used
        ],
        "services": [
            {"id": service_ids[pk], "team": team, "slo_p99_ms": (slos or {}).get(pk, slo)}
            for pk, _, _, team, slo in all_services
            if service_ids[pk] in measured
        ],
        "capacity": _capacity_rows(start, end, classes, unclassed),
        "usage": [],
        "latency": [],
        "preemptions": preemptions,
    }
    # The engine's reader validates the small parts; usage (millions of rows) and latency
    # are handed over as the engine's own records, and replace() validates the whole
    # scenario again (unknown ids, duplicates, alignment, allocations above capacity).
    scenario = dataclasses.replace(
        scenario_from_dict(small_parts), usage=usage, latency=tuple(latency)
    )
    return BuiltScenario(
        scenario=scenario,
        task_pks={name: pk for pk, name in task_ids.items() if name in used},
        service_pks={name: pk for pk, name in service_ids.items() if name in measured},
        unclassed_capacity=unclassed,
    )


def service_slos_of(built: BuiltScenario) -> dict[str, str]:
    """The SLO each service of `built` is judged by, by the service's primary key (text both:
    `PeriodScenario.service_slos`)."""
    return {
        str(built.service_pks[service.id]): str(service.slo_p99_ms)
        for service in built.scenario.services
    }


def task_kinds_of(built: BuiltScenario) -> dict[str, str]:
    """The kind each task of `built` is priced as, by the task's primary key (as text:
    `PeriodScenario.task_kinds`)."""
    return {str(built.task_pks[task.id]): task.kind for task in built.scenario.tasks}


def billed_kinds(revision: PeriodScenario) -> dict[int, str]:
    """The kinds a stored revision of a month priced its tasks as, by task primary key: its
    `task_kinds`. Empty for a revision stored before they were kept: its rebuild takes the
    task rows' kinds, as it did."""
    return {int(pk): kind for pk, kind in revision.task_kinds.items()}


def judged_slos(revision: PeriodScenario) -> dict[int, int]:
    """The SLOs a stored revision of a month judged by, by service primary key, as services
    hold them (whole ms): its `service_slos`; for a revision stored before they were kept,
    read from its scenario's text (the whole month decompressed, once per rebuild), its
    service ids named as `scenario_build` names them today."""
    if revision.service_slos:
        return {int(pk): int(Decimal(slo)) for pk, slo in revision.service_slos.items()}
    services = json.loads(revision.scenario_text())["services"]
    rows = Service.objects.values_list("pk", "external_id", "source__name")
    pks = {name: pk for pk, name in _unique_ids(list(rows)).items()}
    return {
        pks[service["id"]]: int(Decimal(str(service["slo_p99_ms"])))
        for service in services
        if service["id"] in pks
    }


@functools.lru_cache(maxsize=100_000)
def _interval_name(epoch: int) -> str:
    # Cached: capacity and every service's latency name the same few thousand intervals.
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime(ISO_FORMAT)


class ModelClasses:
    """Which class of a book takes each GPU model (`classes.of(model)`), `default` for a model
    no class lists. By `gpu_model_key` from builder 5 on, by the exact name before (a book
    refuses a model in two classes, by either)."""

    def __init__(self, listed: Mapping[str, str], *, keyed: bool = True) -> None:
        # A book published before books were refused two spellings of one model in two
        # classes ("NVIDIA H100 80GB HBM3" in H100, "H100 80GB HBM3" in H100-legacy: a way to
        # price an older driver's nodes apart while models were matched exactly) keeps
        # exact matching: by key, one of its classes would silently take the other's GPUs.
        by_key: dict[str, set[str]] = defaultdict(set)
        for model, name in listed.items():
            by_key[gpu_model_key(model)].add(name)
        self.keyed = keyed and all(len(names) == 1 for names in by_key.values())
        self._listed = {self._key(model): name for model, name in listed.items()}
        self._found: dict[str, str] = {}  # model as metered -> class: a month repeats a few

    def _key(self, model: str) -> str:
        return gpu_model_key(model) if self.keyed else model

    def __bool__(self) -> bool:
        return bool(self._listed)

    def of(self, model: str) -> str:
        found = self._found.get(model)
        if found is None:
            found = self._found[model] = self._listed.get(self._key(model), DEFAULT_CLASS)
        return found

    def unclassed(self, model: str) -> bool:
        """A model the book's classes do not take, in a book that has classes."""
        return bool(self._listed) and self.of(model) == DEFAULT_CLASS


def gpu_classes_by_model(
    price_book: PriceBook, *, builder_version: int = SCENARIO_BUILDER_VERSION
) -> ModelClasses:
    """The book's classes by the GPU models they list, matched as builder `builder_version`
    matched them (module docstring, builder 5)."""
    return ModelClasses(
        {
            model: gpu_class.name
            for gpu_class in price_book.gpu_classes.all()
            for model in gpu_class.models
        },
        keyed=builder_version >= MODEL_KEY_BUILDER,
    )


def _usage_rows(
    start: dt.datetime, end: dt.datetime, task_ids: dict[int, str], classes: ModelClasses
) -> UsageRuns:
    """(interval start in Unix seconds, task id, allocated GPU-seconds[, GPU class]), one tuple
    per task, interval and class (a task's rows of models of one class summed); `default`
    rows have no class, as version 1's. Made as the engine's `UsageRuns`, a run per interval
    and class, so the Scenario checks them a run at a time.

    PostgreSQL packs each interval's and GPU model's rows into one text ("task_pk alloc
    task_pk alloc ..."): a few thousand result rows instead of millions keeps per-row driver
    overhead out of the hot path, and the split below runs in C (maps, no Python code per
    row). Models map to classes here; only an interval in which one task held GPUs of two
    models of one class has its allocations summed in Python (`_summed_fields`).
    """
    tasks: dict[str, str] = {}
    # One Decimal per distinct allocation text: a task holding whole GPUs for a whole step has
    # the same allocation in every such interval, so most rows share a few values.
    decimals: dict[str, Decimal] = {}
    runs: list[tuple] = []
    packed = metering_selectors.usage_packed_per_interval_and_model(start=start, end=end)
    for epoch, models in groupby(packed, itemgetter(0)):  # as they arrive, by interval
        by_class: dict[str, list[str]] = {}
        for _, model, text in models:
            by_class.setdefault(classes.of(model), []).append(text)
        for gpu_class, texts in by_class.items():
            task_names, allocs = _run_fields(texts, task_ids, tasks, decimals)
            runs.append((epoch, gpu_class, task_names, allocs))
    return UsageRuns(runs)


def _run_fields(
    texts: list[str],
    task_ids: dict[int, str],
    tasks: dict[str, str],
    decimals: dict[str, Decimal],
) -> tuple[list[str], list[Decimal]]:
    """The task ids and allocations of one interval's and class's packed texts (see
    `_usage_rows`); `tasks` (pk text -> scenario id) and `decimals` (text -> Decimal) grow
    as rows come."""
    fields = (texts[0] if len(texts) == 1 else " ".join(texts)).split(" ")
    task_pks = fields[0::2]
    allocs = fields[1::2]
    if len(texts) > 1 and len(set(task_pks)) < len(task_pks):
        task_pks, allocs = _summed_fields(task_pks, allocs)
    for task_pk in set(task_pks).difference(tasks):
        tasks[task_pk] = task_ids[int(task_pk)]
    new = set(allocs).difference(decimals)
    if new:
        decimals.update(zip(new, map(Decimal, new), strict=True))
    return list(map(tasks.__getitem__, task_pks)), list(map(decimals.__getitem__, allocs))


def _summed_fields(task_pks: list[str], allocs: list[str]) -> tuple[list[str], list[str]]:
    """Each task once, its allocations summed and written as PostgreSQL's trim_scale(sum)
    writes them (no trailing zeros), so the scenario text is the same as when SQL summed."""
    sums: dict[str, Decimal] = {}
    for task_pk, alloc in zip(task_pks, allocs, strict=True):
        sums[task_pk] = sums.get(task_pk, Decimal(0)) + Decimal(alloc)
    return list(sums), [_trimmed(total) for total in sums.values()]


def _trimmed(total: Decimal) -> str:
    """`total` as PostgreSQL's trim_scale(...)::text writes it: no exponent, no trailing
    zeros after the point."""
    text = format(total, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _capacity_rows(
    start: dt.datetime,
    end: dt.datetime,
    classes: ModelClasses,
    unclassed: dict[str, Decimal],
) -> list[dict]:
    """Capacity per interval and GPU class, summed over sources, fault domains and models;
    `unclassed` takes the capacity of each model no class takes (`ModelClasses.unclassed`).

    PostgreSQL sums per interval and model; models map to classes here, where a class with
    one model in an interval keeps PostgreSQL's text and one with several is summed and
    written as trim_scale writes it, so the text is the one SQL summing by class gave."""
    rows = []
    per_interval = metering_selectors.capacity_per_interval_and_model(start=start, end=end)
    for epoch, models in groupby(per_interval, itemgetter(0)):
        by_class: dict[str, list[str]] = {}
        for _, model, capacity in models:
            by_class.setdefault(classes.of(model), []).append(capacity)
            if classes.unclassed(model):
                unclassed[model] = unclassed.get(model, Decimal(0)) + Decimal(capacity)
        for gpu_class, texts in by_class.items():
            capacity = texts[0] if len(texts) == 1 else _trimmed(sum(map(Decimal, texts)))
            rows.append(
                {"interval": _interval_name(epoch), "capacity_gpu_seconds": capacity}
                | ({} if gpu_class == DEFAULT_CLASS else {"gpu_class": gpu_class})
            )
    return rows


def _latency_rows(histograms: list[tuple[int, str]], service_ids: dict[int, str]) -> list[Latency]:
    """Latency histograms as the engine's records (validated by them, and by the Scenario).

    Built here rather than through `scenario_from_dict`: a month has one per service and
    interval (about 9,000 per service), and skipping the dict round trip halves their cost.
    Each service's histograms arrive as one JSON text, parsed in one call.
    """
    records = []
    bounds: dict[object, Decimal] = {}  # "le" text -> Decimal: a month repeats a few bounds
    for service_pk, text in histograms:  # metering.selectors.latency_histograms
        service = service_ids[service_pk]
        for epoch, stored in _DECIMAL_JSON.decode(text):
            epoch = int(epoch)
            try:
                records.append(Latency(service, epoch, _parsed_buckets(stored, bounds)))
            except (ScenarioError, TypeError, ValueError, ArithmeticError) as error:
                raise ScenarioError(
                    f"latency of {service!r} in {_interval_name(epoch)}: {error}"
                ) from None
    return records


# JSON numbers are read straight into Decimals by their text, as the engine reads them.
_DECIMAL_JSON = json.JSONDecoder(parse_float=Decimal, parse_int=Decimal)


def _buckets(text: str) -> tuple[tuple[Decimal, Decimal], ...]:
    """`[[le, cumulative_count], ...]` (le as text or number, "+Inf" last) as Decimals, read
    as the close reads a stored interval's buckets."""
    return _parsed_buckets(_DECIMAL_JSON.decode(text), {})


def _parsed_buckets(
    stored: list, bounds: dict[object, Decimal]
) -> tuple[tuple[Decimal, Decimal], ...]:
    """Stored `[[le, cumulative_count], ...]` (le as text or number, "+Inf" last, numbers
    already Decimals) as Decimal pairs in increasing `le`; `bounds` keeps each le text's."""
    parsed = []
    for le, count in stored:
        if type(le) is not Decimal:
            bound = bounds.get(le) if type(le) is str else None
            if bound is None:
                bound = INFINITY if is_infinity(le) else Decimal(le)
                if type(le) is str:
                    bounds[le] = bound
            le = bound
        parsed.append((le, count if type(count) is Decimal else Decimal(count)))
    parsed.sort(key=itemgetter(0))
    return tuple(parsed)


def _preemption_rows(
    start: dt.datetime, end: dt.datetime, task_ids: dict[int, str], classes: ModelClasses
) -> list[dict]:
    """The period's preemptions, each with the class of its GPU model when one of `classes`
    takes it; `default` is written without a class."""
    return [
        {
            "task": task_ids[task_pk],
            "pod": pod,
            "at": _instant_name(at),
            "gpus": gpus,
            "seconds_since_start": seconds_since_start,
            "lost_gpu_seconds": lost,
        }
        | ({} if classes.of(model) == DEFAULT_CLASS else {"gpu_class": classes.of(model)})
        for task_pk, pod, at, gpus, seconds_since_start, lost, model in (
            metering_selectors.preemptions_in(start=start, end=end)
        )
    ]


def _preemptions_before(
    start: dt.datetime, task_ids: dict[int, str], preempted: set[str]
) -> dict[int, int]:
    """Task pk -> its preemptions before `start`, for the tasks preempted in the period (the
    count only numbers those). An event is a task's interval with a preemption: rows stored
    one per pod, before ingest recorded one per task, still count once per interval."""
    pks = [pk for pk, name in task_ids.items() if name in preempted]
    return metering_selectors.preemption_counts_before(start=start, task_pks=pks)


def _instant_name(moment: dt.datetime) -> str:
    moment = moment.astimezone(dt.UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime(ISO_FORMAT)


def _period_task_pks(start: dt.datetime, end: dt.datetime) -> list[int]:
    """Tasks with usage or a preemption in [start, end): the ones the scenario names."""
    return metering_selectors.task_pks_metered_in(start=start, end=end)


def _task_names(rows: list[tuple[int, str, str, str, str, str]]) -> dict[int, str]:
    """pk -> scenario id of the period's tasks (pk, external_id, source, team, kind,
    namespace): each named as plainly as keeps it unique (see the module's docstring)."""
    levels = [
        {pk: name for pk, name, *_ in rows},
        {pk: f"{source}/{name}" for pk, name, source, *_ in rows},
        {pk: f"{source}/{ns}/{name}" for pk, name, source, _, _, ns in rows},
        {pk: f"{source}/{ns}/{name} ({team})" for pk, name, source, team, _, ns in rows},
    ]
    counts = [Counter(level.values()) for level in levels]
    names = {}
    for pk, *_ in rows:
        unique = (
            level[pk] for level, count in zip(levels, counts, strict=True) if count[level[pk]] == 1
        )
        names[pk] = next(unique, levels[-1][pk])
    return names


def _unique_ids(rows: list[tuple[int, str, str]]) -> dict[int, str]:
    """pk -> external id, qualified by the source name only where two sources collide."""
    counts: dict[str, int] = {}
    for _, external_id, _ in rows:
        counts[external_id] = counts.get(external_id, 0) + 1
    return {
        pk: external_id if counts[external_id] == 1 else f"{source}/{external_id}"
        for pk, external_id, source in rows
    }
