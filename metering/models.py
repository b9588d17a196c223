"""What Tandem knows about the pool: where telemetry comes from, and the metered facts.

Usage, capacity and latency are stored per metering interval (`step_seconds`, aligned to the
Unix epoch, named by its start in UTC). A window re-ingested replaces its rows, so every
table that a window writes has a unique key on (thing, interval start); never with fewer
samples than they came from, unless an operator accepts the loss (metering.services).
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from django.db import models

from kernel.tasks import TASK_KIND_CHOICES, TASK_KINDS

DEFAULT_LABEL_MAPPING = {
    "task_label": "label_task",
    "team_label": "label_team",
    "service_label": "model_name",
}
DEFAULT_PRIORITY_CLASS_KINDS = {
    "inference-critical": "inference",
    "training-interactive": "training_interactive",
    "training-batch": "training_batch",
    "preprocessing": "preprocessing",
}


class Source(models.Model):
    """A Prometheus (or any PromQL-compatible store) that Tandem reads."""

    name = models.SlugField(unique=True)
    url = models.URLField(max_length=500)
    bearer_token = models.CharField(max_length=500, blank=True)
    basic_auth_user = models.CharField(max_length=200, blank=True)
    basic_auth_password = models.CharField(max_length=200, blank=True)
    verify_tls = models.BooleanField(default=True)
    scrape_interval_seconds = models.PositiveIntegerField(
        default=15,
        help_text="How often Prometheus scrapes dcgm-exporter: each GPU sample counts as this"
        " many seconds. Windows scraped more often fail, naming the exporter.",
    )
    label_mapping = models.JSONField(default=dict, blank=True)
    priority_class_kinds = models.JSONField(default=dict, blank=True)
    max_concurrent_queries = models.PositiveSmallIntegerField(default=4)
    # Beat back-fills every window from here on; empty: from the source's first window.
    ingest_from = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Beat ingests every window from this instant on (back-filling what is"
        " missing); empty: from the source's first window.",
    )
    # Sharded windows (metering.shards): one node-name pattern per shard, plus a shard of
    # every other node; empty: a window is measured in one piece.
    shard_node_patterns = models.JSONField(
        default=list,
        blank=True,
        help_text="Node-name regular expressions, one per shard (a shard of the other nodes is"
        ' added): e.g. ["gpu-a-.*", "gpu-b-.*"]. Empty: windows are not sharded.',
    )
    enabled = models.BooleanField(default=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Team(models.Model):
    name = models.CharField(max_length=200, unique=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Task(models.Model):
    """A unit of work that is billed: a Job, a Deployment's service, a notebook.

    Keyed by source, namespace and name (the pod's `task` label, else its owner, else the pod):
    Job `trainer` in `alpha` and Job `trainer` in `beta` are two tasks. One row holds the
    intervals a key ran under one team: when a relabel moves the key to another team, later
    intervals go to a row of that team (audited) and the earlier ones stay where they were
    metered, so no statement, task page or report of the past changes team.
    """

    # No index of its own: the unique key (source, namespace, external_id, team) begins with it
    # (migration 0032; as every table below whose unique key begins with its foreign key).
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="tasks", db_index=False
    )
    # Empty on rows metered before tasks were keyed by namespace; ingest fills it in when it
    # next meets the same name under the same team (metering.services._legacy_tasks_adopt).
    namespace = models.CharField(max_length=253, blank=True, default="", db_default="")
    external_id = models.CharField(max_length=300)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="tasks")
    kind = models.CharField(max_length=32, choices=TASK_KIND_CHOICES)
    fault_domain = models.CharField(max_length=200, blank=True)
    first_seen = models.DateTimeField()
    created = models.DateTimeField(null=True, blank=True)
    first_started = models.DateTimeField(null=True, blank=True)
    ended = models.DateTimeField(null=True, blank=True)
    # Start of the last interval this row was metered in: where a pod without
    # kube-state-metrics identity goes when its key has rows under several teams.
    last_seen = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["external_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "namespace", "external_id", "team"],
                name="task_unique_per_source_namespace_team",
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=list(TASK_KINDS)), name="task_kind_known"
            ),
        ]

    def __str__(self) -> str:
        return self.external_id


class Service(models.Model):
    """An inference service with a latency objective (SLO on P99)."""

    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="services", db_index=False
    )
    external_id = models.CharField(max_length=300)  # namespace/model_name by default
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="services")
    slo_p99_ms = models.PositiveIntegerField(default=1000)
    is_key = models.BooleanField(default=True)
    # When an operator stated the SLO (set_slo, the admin). None: the default above, which
    # nobody stated: a service ingest found (a model renamed by an upgrade, a new one) is
    # judged by it, and the SLA breaches it decides move money (pricing rule 4).
    slo_stated = models.DateTimeField(null=True, blank=True)
    # When an operator stated the team (the admin: adding the service, changing its team, or
    # confirming it as it is). None: the team ingest gave it, its namespace's when it first met
    # the service, kept when the namespace moves to another team; the credits of its SLA
    # breaches go to this team (pricing rule 4), so a move nobody stated is shown
    # (`metering.selectors.services_team_moved`).
    team_stated = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["external_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_id"], name="service_unique_per_source"
            ),
        ]

    def __str__(self) -> str:
        return self.external_id


class UsageInterval(models.Model):
    # No index of its own: usage_unique's begins with the task, and serves every lookup by
    # task (the triggers' checks included); a second one cost every COPY a sixth more. No
    # database constraint either: triggers check the tasks once per statement (migration
    # 0017), where the foreign key looked each row up, a third of the usage COPY.
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, related_name="usage", db_index=False, db_constraint=False
    )
    interval_start = models.DateTimeField()
    alloc_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=6)
    busy_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=6, default=0)
    memory_avg_bytes = models.BigIntegerField(default=0)
    memory_peak_bytes = models.BigIntegerField(default=0)
    read_operations = models.BigIntegerField(default=0)
    write_operations = models.BigIntegerField(default=0)
    read_bytes = models.BigIntegerField(default=0)
    write_bytes = models.BigIntegerField(default=0)
    # dcgm-exporter's `modelName` ("" when the GPU has none), priced by GPU class; in the
    # database's default too, so writers that predate it (and COPY) need not name it.
    gpu_model = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "interval_start", "gpu_model"], name="usage_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(alloc_gpu_seconds__gte=0), name="usage_alloc_not_negative"
            ),
        ]
        indexes = [models.Index(fields=["interval_start"])]

    def __str__(self) -> str:
        return f"{self.task_id} {self.interval_start:%Y-%m-%d %H:%M}"


class CapacityInterval(models.Model):
    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="capacity", db_index=False
    )
    fault_domain = models.CharField(max_length=200, blank=True)
    interval_start = models.DateTimeField()
    gpus_present = models.DecimalField(max_digits=12, decimal_places=6)
    capacity_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=6)
    # dcgm-exporter's `modelName` ("" when the GPU has none), priced by GPU class; in the
    # database's default too, so writers that predate it (and COPY) need not name it.
    gpu_model = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "fault_domain", "interval_start", "gpu_model"],
                name="capacity_unique",
            ),
        ]
        indexes = [models.Index(fields=["interval_start"])]

    def __str__(self) -> str:
        return f"{self.source_id} {self.fault_domain} {self.interval_start:%Y-%m-%d %H:%M}"


class LatencyInterval(models.Model):
    """Histogram bucket increments of one service within one interval (cumulative by `le`)."""

    service = models.ForeignKey(
        Service, on_delete=models.PROTECT, related_name="latency", db_index=False
    )
    interval_start = models.DateTimeField()
    # [[le_seconds_as_string, cumulative_count], ...], last le is "+Inf"
    buckets = models.JSONField()
    request_count = models.BigIntegerField(default=0)
    # The interval's own P99 (`metering.services.latency_p99` of `buckets`), stored at ingest so
    # SLA breach counts are one SQL filter; null when the buckets give no quantile (no requests).
    p99_seconds = models.DecimalField(max_digits=50, decimal_places=30, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["service", "interval_start"], name="latency_unique"),
        ]
        indexes = [models.Index(fields=["interval_start"])]

    def __str__(self) -> str:
        return f"{self.service_id} {self.interval_start:%Y-%m-%d %H:%M}"


class Preemption(models.Model):
    task = models.ForeignKey(
        Task, on_delete=models.PROTECT, related_name="preemptions", db_index=False
    )
    # One row per task and interval: the first of its pods evicted, and how many were.
    pod = models.CharField(max_length=300, blank=True)
    pods = models.PositiveIntegerField(default=1)
    at = models.DateTimeField()
    gpus = models.DecimalField(max_digits=12, decimal_places=6)
    seconds_since_start = models.PositiveIntegerField()
    lost_gpu_seconds = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    # dcgm-exporter's `modelName` of the GPUs its metered allocation held (the one holding
    # most of them): its compensation is priced in that model's class (docs/pricing.md "GPU
    # classes", rule 5). Empty: unknown (rows from before), priced as `default`.
    gpu_model = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        ordering = ["at"]
        constraints = [
            models.UniqueConstraint(fields=["task", "pod", "at"], name="preemption_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} {self.pod} {self.at:%Y-%m-%d %H:%M:%S}"


class PodWait(models.Model):
    """How long one pod waited to be scheduled, counted where the wait ended: when the pod was
    scheduled, or when it was last seen Pending before it was gone, never scheduled (it gave
    up waiting: deleted by its user, a Job's deadline, a queue's timeout; `scheduled` is
    None). A pod still Pending has no row yet. A pod name comes back (a StatefulSet's `name-0`
    recreated, next month's run of the same job), each time with a new creation time: each
    incarnation keeps its own wait, so a later one never overwrites an earlier month's (health
    numbers of a closed month stay as closed)."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="waits", db_index=False)
    pod = models.CharField(max_length=300)
    created = models.DateTimeField()
    scheduled = models.DateTimeField(null=True, blank=True)
    ended = models.DateTimeField()  # `scheduled`, else the end of its last Pending tick
    seconds = models.PositiveIntegerField()  # ended - created

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "pod", "created"], name="podwait_unique"),
            models.CheckConstraint(
                condition=models.Q(scheduled__isnull=True) | models.Q(scheduled=models.F("ended")),
                name="podwait_scheduled_ends_it",
            ),
        ]
        indexes = [models.Index(fields=["ended"])]

    def __str__(self) -> str:
        return f"{self.task_id} {self.pod}"

    @property
    def gave_up(self) -> bool:
        return self.scheduled is None


# Warnings that start with this name the nodes and GPUs whose samples are missing.
COMPLETENESS_WARNING = "completeness:"


class IngestQueries(models.Model):
    """The PromQL a run of consecutive windows was measured with, recorded once for the run:
    a batch sends one range query per meter for all its windows (metering.querying), so each
    window of it was measured with all of them. `reports.explain` shows them behind a charge.

    Recorded once because a batch's narrowed queries name the pods they read: at 1,000 GPUs a
    72-window batch's are about 200 KB, which every window used to store a copy of (a sixth
    of the write phase, and ~60 MB a day). A run ingested again records its queries anew and
    the record its windows no longer use is deleted in the same transaction."""

    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="ingest_queries", db_index=False
    )
    first_start = models.DateTimeField()
    last_start = models.DateTimeField()
    queries = models.JSONField(default=list)  # [{"meter", "promql", "samples", "seconds", ...}]
    recorded = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["source", "first_start"])]
        verbose_name_plural = "ingest queries"

    def __str__(self) -> str:
        return f"{self.source} {self.first_start:%Y-%m-%d %H:%M}-{self.last_start:%H:%M} queries"


class IngestWindow(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    source = models.ForeignKey(
        Source, on_delete=models.PROTECT, related_name="windows", db_index=False
    )
    start = models.DateTimeField()
    end = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    rows_written = models.PositiveIntegerField(default=0)
    # Windows written before migration 0014 hold their own copy of the queries; later ones
    # point at their run's record (use `recorded_queries`, which reads either).
    queries = models.JSONField(default=list, blank=True)  # [{"promql", "seconds"}]
    measured_with = models.ForeignKey(
        IngestQueries, null=True, blank=True, on_delete=models.SET_NULL, related_name="windows"
    )
    prometheus_seconds = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    samples_seen = models.BigIntegerField(default=0)
    samples_expected = models.BigIntegerField(default=0)
    completeness = models.DecimalField(max_digits=7, decimal_places=6, default=0)
    warnings = models.JSONField(default=list, blank=True)
    # kube-state-metrics wrote no series of the preemption reason while writing the others at
    # 0 (a release before v2.19): the window's preemptions, and rule 5's credits, are unknown.
    preemptions_unreadable = models.BooleanField(default=False, db_default=False)
    # Inference pods that held GPUs through the window and served metrics without the latency
    # histogram: their SLA breaches, and rule 4's penalties, are unknown (measure.LATENCY_UNSEEN).
    latency_unseen_pods = models.PositiveIntegerField(default=0, db_default=0)
    # GPU-seconds of pods kube-state-metrics described nowhere in the window's batch: their
    # task, team and kind are guesses (measure.UNDESCRIBED); and of those it described. Some
    # moving from described to guessed on a re-ingest is a loss like fewer samples
    # (writer._identity_lost). Windows written before migration 0021 hold 0 for both, so
    # their re-ingest is never refused so.
    undescribed_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    described_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    # Workloads Kueue evicted to preempt them in the window (measure.KUEUE_PREEMPTIONS): no
    # pod shows them preempted, so rule 5 cannot credit them; and Kueue's counts first read
    # in the window that could not be placed in time (measure._kueue_preemptions). 0 for
    # windows written before migration 0022.
    kueue_preempted_workloads = models.PositiveIntegerField(default=0, db_default=0)
    kueue_counts_unplaced = models.PositiveIntegerField(default=0, db_default=0)
    # GPU-seconds of pods under priority classes the source does not map to a kind, counted
    # as training_batch (measure.KINDS_UNMAPPED). 0 for windows written before migration 0023.
    unmapped_kind_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    # Busy GPU-seconds of GPUs no pod held: work outside any pod's GPU request, billed to no
    # task (measure.UNHELD_BUSY). 0 for windows written before migration 0024.
    unheld_busy_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    # Its GPUs are in `GpuSighting` (written since metering migration 0026): beside another
    # source's windows, one without can hide two sources metering one GPU.
    gpus_sighted = models.BooleanField(default=False, db_default=False)
    # Workloads Kueue admitted in the window and the seconds they had waited for it, by task
    # kind: {"training_batch": {"workloads": 3, "seconds": "5400.000000"}}
    # (measure._kueue_admissions). Their pods' waits start after it. {} where Kueue is not
    # scraped; null for windows written before migration 0028, which did not read it (a wait
    # compared across them cannot be told from the queue's: reports' `waits`).
    kueue_admissions = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    first_written = models.DateTimeField(null=True, blank=True)
    changed_after_first_write = models.DateTimeField(null=True, blank=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["start"]
        constraints = [
            models.UniqueConstraint(fields=["source", "start", "end"], name="window_unique"),
            models.CheckConstraint(
                condition=models.Q(end__gt=models.F("start")), name="window_ordered"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.start:%Y-%m-%d %H:%M}-{self.end:%H:%M}"

    @property
    def recorded_queries(self) -> list[dict]:
        """The PromQL this window was measured with (its run's, or its own copy if older)."""
        if self.measured_with_id is not None:
            return self.measured_with.queries
        return self.queries

    @property
    def completeness_warnings(self) -> list[str]:
        """The warnings that name the nodes and GPUs whose samples are missing, and for how
        long (metering.measure._derive_completeness writes them)."""
        return [w for w in self.warnings or [] if str(w).startswith(COMPLETENESS_WARNING)]


class MultirangeField(models.Field):
    """PostgreSQL `tstzmultirange`: a set of time ranges that merges adjacent ones itself.
    Written and read in SQL only (`metering.writer`, `metering.selectors`)."""

    def db_type(self, connection: object) -> str:
        return "tstzmultirange"


def sighting_month(moment: datetime) -> date:
    """The UTC month whose `GpuSighting` row holds the window starting at `moment`."""
    return moment.astimezone(UTC).date().replace(day=1)


class GpuSighting(models.Model):
    """The intervals of one UTC month in which a source's stored rows count a GPU (by its
    UUID, unique to the device the world over) present, kept by the same transaction that
    writes the windows, so a window ingested again replaces its share. Two sources whose
    sightings of one GPU overlap meter it twice: its capacity and its pods' usage are in the
    pool twice (`selectors.gpus_metered_twice`), and the month refuses to close. A row per
    month keeps each multirange to a month's gaps and each check to its months' rows."""

    source = models.ForeignKey(
        Source, on_delete=models.CASCADE, related_name="gpu_sightings", db_index=False
    )
    month = models.DateField()  # the first day of the UTC month
    uuid = models.TextField()
    node = models.CharField(max_length=253, blank=True)  # where it was last written from
    seen = MultirangeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "month", "uuid"], name="gpusighting_source_month_uuid"
            )
        ]
        indexes = [models.Index(fields=["month", "uuid"])]

    def __str__(self) -> str:
        return f"{self.source} {self.uuid} from {self.month}"


class IngestBatch(models.Model):
    """One attempt at a sharded run of consecutive windows (metering.shards): its shards stage
    what Prometheus answered, and a combiner writes the windows once all of them have.

    Starting a run again deletes the attempts whose windows overlap it (their staged shards
    go with them), and the combiner deletes its batch in the transaction that writes the
    windows, so no staged row outlives the attempt it belongs to."""

    source = models.ForeignKey(Source, on_delete=models.CASCADE, related_name="ingest_batches")
    first_start = models.DateTimeField()
    last_start = models.DateTimeField()
    window_ids = models.JSONField(default=list)
    # The source's patterns when the attempt started: its shards partition the pool by these,
    # even if an operator edits the source meanwhile.
    node_patterns = models.JSONField(default=list)
    shards = models.PositiveSmallIntegerField()
    accept_loss = models.JSONField(null=True, blank=True)  # {"operator", "reason"}
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.source} {self.first_start:%Y-%m-%d %H:%M}-{self.last_start:%H:%M} shards"


class IngestShard(models.Model):
    """One shard of a batch: what Prometheus answered for its node set, staged exactly
    (metering.shards.observation_dump) once measured."""

    class Status(models.TextChoices):
        PENDING = "pending"
        STAGED = "staged"

    batch = models.ForeignKey(
        IngestBatch, on_delete=models.CASCADE, related_name="shard_rows", db_index=False
    )
    index = models.PositiveSmallIntegerField()
    nodes = models.TextField(blank=True)  # the node set, as an operator reads it
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Compressed with lz4 where the server has it (migration 0016): it is written once and
    # read once, so the faster compression wins over pglz's slightly smaller rows.
    observation = models.BinaryField(default=b"")
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["batch", "index"]
        constraints = [
            models.UniqueConstraint(fields=["batch", "index"], name="shard_unique_per_batch"),
        ]

    def __str__(self) -> str:
        return f"{self.batch} shard {self.index}"


# --- Hourly rollup ----------------------------------------------------------------------
#
# A month of a 1,000-GPU pool is ~4 million usage rows; the pages and the health numbers sum
# them by hour, day, team or kind, never by interval. These tables hold the same sums per UTC
# hour and are kept by PostgreSQL triggers on the interval tables (migration 0003), so every
# writer (ingest's COPY, the ORM, raw SQL loads, a fix in psql) updates them in the same
# transaction and they cannot drift. Readers use them for the whole hours of a range in a pool
# zone whose offsets are whole hours (`metering.selectors.range_split`), where an hour sum is
# exactly the sum of the intervals starting in it, and read the intervals for the edges.


class UnboundedDecimalField(models.DecimalField):
    """PostgreSQL `numeric` with no precision: sums of histogram counts kept exactly."""

    def db_type(self, connection: object) -> str:
        return "numeric"


class UsageHour(models.Model):
    """Sums of one task's usage intervals that start within one UTC hour."""

    task = models.ForeignKey(
        Task, on_delete=models.DO_NOTHING, related_name="usage_hours", db_index=False
    )
    hour_start = models.DateTimeField()
    intervals = models.PositiveIntegerField()
    alloc_gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    busy_gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    # Sum of the intervals' average bytes: the mean over intervals is this / `intervals`.
    memory_avg_bytes_sum = models.DecimalField(max_digits=30, decimal_places=0)
    memory_peak_bytes = models.BigIntegerField()
    read_operations = models.DecimalField(max_digits=30, decimal_places=0)
    write_operations = models.DecimalField(max_digits=30, decimal_places=0)
    read_bytes = models.DecimalField(max_digits=30, decimal_places=0)
    write_bytes = models.DecimalField(max_digits=30, decimal_places=0)
    gpu_model = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["task", "hour_start", "gpu_model"], name="usagehour_unique"
            ),
        ]
        indexes = [models.Index(fields=["hour_start"])]

    def __str__(self) -> str:
        return f"{self.task_id} {self.hour_start:%Y-%m-%d %H:00}"


class TeamHour(models.Model):
    """Usage of one team's tasks of one kind that start within one UTC hour: the pool-wide
    and per-team curves, shares and quotas, ten times fewer rows than per task.

    Kept from `UsageHour` and from tasks whose team or kind changes, so it always follows the
    task row's team and kind, as a join would. Ingest never changes a row's team (a relabel
    gets a row of its own, see `Task`); kube-state-metrics may change its kind.
    """

    team = models.ForeignKey(
        Team, on_delete=models.DO_NOTHING, related_name="usage_hours", db_index=False
    )
    kind = models.CharField(max_length=32, choices=TASK_KIND_CHOICES)
    hour_start = models.DateTimeField()
    alloc_gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    busy_gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "kind", "hour_start"], name="teamhour_unique"),
        ]
        indexes = [models.Index(fields=["hour_start"])]

    def __str__(self) -> str:
        return f"{self.team_id} {self.kind} {self.hour_start:%Y-%m-%d %H:00}"


class CapacityHour(models.Model):
    """Capacity GPU-seconds of one source's intervals that start within one UTC hour."""

    source = models.ForeignKey(
        Source, on_delete=models.DO_NOTHING, related_name="capacity_hours", db_index=False
    )
    hour_start = models.DateTimeField()
    capacity_gpu_seconds = models.DecimalField(max_digits=24, decimal_places=6)
    gpu_model = models.CharField(max_length=200, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "hour_start", "gpu_model"], name="capacityhour_unique"
            ),
        ]
        indexes = [models.Index(fields=["hour_start"])]

    def __str__(self) -> str:
        return f"{self.source_id} {self.hour_start:%Y-%m-%d %H:00}"


class LatencyHourBucket(models.Model):
    """One histogram bound of one service, summed over the intervals of one UTC hour.

    `intervals` counts the intervals whose buckets hold this bound, so a reader merging a
    range can keep only the bounds present in every interval, as `reports.health` does.
    """

    service = models.ForeignKey(
        Service, on_delete=models.DO_NOTHING, related_name="latency_hour_buckets", db_index=False
    )
    hour_start = models.DateTimeField()
    le = models.CharField(max_length=64)  # the bound as stored in the interval's buckets
    count = UnboundedDecimalField(max_digits=1000, decimal_places=0)
    intervals = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["service", "hour_start", "le"], name="latencyhourbucket_unique"
            ),
        ]
        indexes = [models.Index(fields=["hour_start"])]

    def __str__(self) -> str:
        return f"{self.service_id} {self.hour_start:%Y-%m-%d %H:00} le={self.le}"
