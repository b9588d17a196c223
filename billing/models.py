"""What billing stores: price books, closed periods with their statements, and quotas.

Two kinds of rows never change once written, and the database enforces it with triggers
(migrations 0002 and 0003) besides the model guards below:

- a *published* price book and its GPU classes (a change is a new version);
- everything a period close writes: the close itself, its scenario snapshots, statements,
  their lines, per-task contributions and per-GPU-class parts (migration 0006), platform
  lines and SLA breaches. Late data never edits them: the next close adds correction lines
  instead.
"""

from __future__ import annotations

import decimal
import zlib
from decimal import Decimal

from django.db import IntegrityError, models
from django.db.models import Q

from kernel.period import PERIOD_REGEX
from kernel.price_book_fields import (
    GPU_CLASS_DECIMAL_FIELDS,
    GPU_CLASS_OPTIONAL_FIELDS,
    PRICE_BOOK_DECIMAL_FIELDS,
    PRICE_BOOK_FIELDS,
)
from kernel.tasks import TASK_KINDS
from metering.models import Service, Task, Team

# The class of every GPU no class of the book names (docs/pricing.md "GPU classes").
DEFAULT_GPU_CLASS = "default"


# Rounded amounts: the currency's minor unit (price books are limited to currencies of at
# most two decimals, see services.price_book_create_draft).
MONEY = {"max_digits": 20, "decimal_places": 2}
# Unrounded figures exactly as the engine computes them: it works on a fixed grid of 30
# decimal places, so these columns hold its values without losing a digit.
EXACT = {"max_digits": 60, "decimal_places": 30}


class ImmutableRecordError(IntegrityError):
    """A write to a row that must never change (a published price book, a closed period)."""


class LineKind(models.TextChoices):
    BASELINE = "baseline", "Reserved inference baseline"
    STANDARD = "standard", "Usage at the standard rate"
    OFFPEAK = "offpeak", "Training usage at the off-peak rate"
    SLA_PENALTY = "sla_penalty", "Latency objective penalty"
    SLA_CREDIT = "sla_credit", "Latency objective credit"
    COMPENSATION = "compensation", "Preemption compensation"


class PlatformLineName(models.TextChoices):
    IDLE_CAPACITY = "idle_capacity", "Idle capacity"
    RESERVE_RESOLD = "reserve_resold", "Reserve resold"
    OFFPEAK_DISCOUNT = "offpeak_discount", "Off-peak discount"
    STARVATION_COMPENSATION = "starvation_compensation", "Starvation compensation"
    UNASSIGNED_RESERVATION = "unassigned_reservation", "Unassigned reservation"
    ROUNDING = "rounding", "Rounding"


class PriceBook(models.Model):
    """One version of the prices (docs/pricing.md "Price book"). Published versions never change."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        PUBLISHED = "published"

    version = models.PositiveIntegerField(unique=True)
    effective_from = models.DateField(help_text="First day (pool time zone) it prices.")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    published_at = models.DateTimeField(null=True, blank=True)
    currency = models.CharField(max_length=3, help_text="ISO 4217 code, e.g. CNY")
    timezone = models.CharField(max_length=64, help_text="The pool's IANA time zone")
    depreciation_per_gpu_hour = models.DecimalField(max_digits=14, decimal_places=6)
    facility_per_gpu_hour = models.DecimalField(max_digits=14, decimal_places=6)
    electricity_per_kwh = models.DecimalField(max_digits=14, decimal_places=6)
    gpu_average_power_kw = models.DecimalField(max_digits=14, decimal_places=6)
    reserved_inference_share = models.DecimalField(max_digits=7, decimal_places=6)
    peak_hours = models.JSONField(help_text="[start, end) local hours, e.g. [9, 22]")
    sla_penalty_per_interval = models.DecimalField(max_digits=14, decimal_places=6)
    sla_min_requests = models.PositiveIntegerField()
    starvation_preemption_threshold = models.PositiveIntegerField()
    starvation_lost_work_cap_seconds = models.PositiveIntegerField()
    notes = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(status="draft", published_at__isnull=True)
                    | models.Q(status="published", published_at__isnull=False)
                ),
                name="price_book_published_has_time",
            ),
            models.CheckConstraint(
                condition=models.Q(currency__regex=r"^[A-Z]{3}$"), name="price_book_currency_iso"
            ),
            models.CheckConstraint(
                condition=models.Q(reserved_inference_share__gte=0)
                & models.Q(reserved_inference_share__lte=1),
                name="price_book_share_between_0_and_1",
            ),
            models.CheckConstraint(
                condition=models.Q(depreciation_per_gpu_hour__gte=0)
                & models.Q(facility_per_gpu_hour__gte=0)
                & models.Q(electricity_per_kwh__gte=0)
                & models.Q(gpu_average_power_kw__gte=0)
                & models.Q(sla_penalty_per_interval__gte=0),
                name="price_book_prices_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"v{self.version} from {self.effective_from} ({self.status})"

    def save(self, *args, **kwargs) -> None:
        if (
            self.pk is not None
            and type(self).objects.filter(pk=self.pk, status=self.Status.PUBLISHED).exists()
        ):
            raise ImmutableRecordError(
                f"price book v{self.version} is published and cannot change; "
                "create a new version instead"
            )
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        if self.status == self.Status.PUBLISHED:
            raise ImmutableRecordError(f"price book v{self.version} is published: never deleted")
        return super().delete(*args, **kwargs)

    @property
    def is_published(self) -> bool:
        return self.status == self.Status.PUBLISHED

    def to_scenario_dict(self, gpu_classes: list[PriceBookGpuClass] | None = None) -> dict:
        """The `price_book` object of a scenario file (docs/pricing.md), amounts as strings.

        `gpu_classes` defaults to the book's stored classes (pass unsaved ones to validate a
        draft before it is stored). A book without classes writes no `gpu_classes` at all:
        its scenarios keep the text, and the hash, they had before classes existed.
        """
        if gpu_classes is None:
            gpu_classes = list(self.gpu_classes.all()) if self.pk is not None else []
        # Decimals as text, whole numbers (the lost-work cap too) as JSON integers.
        book = {}
        for name in PRICE_BOOK_FIELDS:
            value = getattr(self, name)
            if name in PRICE_BOOK_DECIMAL_FIELDS:
                value = decimal_text(value)
            elif name == "peak_hours":
                value = list(value)
            book[name] = value
        if gpu_classes:
            ordered = sorted(gpu_classes, key=lambda item: item.name)
            book["gpu_classes"] = [item.to_scenario_dict() for item in ordered]
        return book


class PriceBookGpuClass(models.Model):
    """A GPU class of a price book version (docs/pricing.md "GPU classes"): the GPU models it
    takes and their own depreciation, facility share, power and, optionally, reserve share.

    Part of its book: editable while the book is a draft, never changed once it is published
    (the model guard below and a database trigger, migration 0003). The book's own D, F, W
    and s are the class `default`, which takes every GPU no class names.
    """

    price_book = models.ForeignKey(PriceBook, on_delete=models.CASCADE, related_name="gpu_classes")
    name = models.CharField(max_length=64, help_text="What statements call it, e.g. H100")
    depreciation_per_gpu_hour = models.DecimalField(max_digits=14, decimal_places=6)
    facility_per_gpu_hour = models.DecimalField(max_digits=14, decimal_places=6)
    gpu_average_power_kw = models.DecimalField(max_digits=14, decimal_places=6)
    reserved_inference_share = models.DecimalField(
        max_digits=7,
        decimal_places=6,
        null=True,
        blank=True,
        help_text="Share of this class reserved for inference; empty: the book's share",
    )
    # Last: from here on, `models` in this class body is the field, not django.db.models.
    models = models.JSONField(
        help_text='dcgm-exporter modelName values it takes: ["NVIDIA L40S"] (the "NVIDIA "'
        ' prefix, spaces and case aside: it takes "L40S" too)'
    )

    class Meta:
        ordering = ["price_book", "name"]
        verbose_name = "GPU class"
        verbose_name_plural = "GPU classes"
        constraints = [
            # Deferred: a save may swap two classes' names, unique again at commit.
            models.UniqueConstraint(
                fields=["price_book", "name"],
                name="gpu_class_name_unique",
                deferrable=models.Deferrable.DEFERRED,
            ),
            models.CheckConstraint(
                condition=~models.Q(name="default") & ~models.Q(name=""),
                name="gpu_class_name_not_default",
            ),
            models.CheckConstraint(
                condition=models.Q(depreciation_per_gpu_hour__gte=0)
                & models.Q(facility_per_gpu_hour__gte=0)
                & models.Q(gpu_average_power_kw__gte=0),
                name="gpu_class_prices_not_negative",
            ),
            models.CheckConstraint(
                condition=models.Q(reserved_inference_share__isnull=True)
                | (
                    models.Q(reserved_inference_share__gte=0)
                    & models.Q(reserved_inference_share__lte=1)
                ),
                name="gpu_class_share_between_0_and_1",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} in price book v{self.price_book.version}"

    def save(self, *args, **kwargs) -> None:
        self._refuse_if_published()
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        self._refuse_if_published()
        return super().delete(*args, **kwargs)

    def _refuse_if_published(self) -> None:
        books = {self.price_book_id}
        if self.pk is not None:
            books |= set(type(self).objects.filter(pk=self.pk).values_list("price_book", flat=True))
        published = PriceBook.objects.filter(pk__in=books, status=PriceBook.Status.PUBLISHED)
        version = published.values_list("version", flat=True).first()
        if version is not None:
            raise ImmutableRecordError(
                f"price book v{version} is published: its GPU classes cannot change; "
                "create a new version instead"
            )

    def to_scenario_dict(self) -> dict:
        """One entry of the book's `gpu_classes` in a scenario file, amounts as strings."""
        record = {
            "name": self.name,
            "models": list(self.models) if isinstance(self.models, list) else self.models,
            **{name: decimal_text(getattr(self, name)) for name in GPU_CLASS_DECIMAL_FIELDS},
        }
        for name in GPU_CLASS_OPTIONAL_FIELDS:
            if getattr(self, name) is not None:
                record[name] = decimal_text(getattr(self, name))
        return record


def decimal_text(value: Decimal) -> str:
    """A stored decimal as docs/pricing.md writes it: no padding zeros beyond two places.

    `Decimal("11.500000")` becomes "11.50", `Decimal("0.820000")` "0.82", so a book stored in
    the database yields the same scenario text (and hash) as the same book typed by hand.
    """
    normalized = value.normalize()
    if normalized.as_tuple().exponent > -2:
        return str(normalized.quantize(Decimal("0.01")))
    return str(normalized)


class ImmutableQuerySet(models.QuerySet):
    """Refuses bulk updates and deletes of rows that belong to a closed period."""

    def update(self, **kwargs):
        raise ImmutableRecordError(f"{self.model._meta.verbose_name} rows never change")

    def delete(self):
        raise ImmutableRecordError(f"{self.model._meta.verbose_name} rows are never deleted")


class ImmutableModel(models.Model):
    """A row written once, when a period closes (insert only; triggers refuse the rest)."""

    objects = ImmutableQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs) -> None:
        if not self._state.adding:
            raise ImmutableRecordError(
                f"{self._meta.verbose_name} {self.pk} belongs to a closed period and never changes"
            )
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ImmutableRecordError(
            f"{self._meta.verbose_name} {self.pk} belongs to a closed period and is never deleted"
        )


class PeriodClose(ImmutableModel):
    """A month, priced and closed: the input it was priced from and the totals."""

    class Status(models.TextChoices):
        CLOSED = "closed"

    period = models.CharField(max_length=7, unique=True, help_text="YYYY-MM, pool time zone")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.CLOSED)
    timezone = models.CharField(max_length=64)
    period_start = models.DateTimeField(help_text="First instant of the month (UTC)")
    period_end = models.DateTimeField(help_text="First instant after the month (UTC)")
    price_book = models.ForeignKey(PriceBook, on_delete=models.PROTECT, related_name="closes")
    price_book_version = models.PositiveIntegerField()
    engine_version = models.CharField(max_length=32)
    # How the scenario was built from metering (billing.scenarios.SCENARIO_BUILDER_VERSION):
    # verify and corrections re-build the month the same way. period_close always sets it;
    # closes from before version 2 (and rows written by hand) are builder 1's.
    scenario_builder_version = models.PositiveSmallIntegerField(default=1)
    scenario_sha256 = models.CharField(max_length=64)
    currency = models.CharField(max_length=3)
    standard_rate = models.DecimalField(**EXACT)
    offpeak_rate = models.DecimalField(**EXACT)
    pool_cost_unrounded = models.DecimalField(**EXACT)
    pool_cost = models.DecimalField(**MONEY)
    # Differences of earlier months' pool cost found through late data, carried by this close.
    pool_cost_corrections = models.DecimalField(**MONEY, default=Decimal("0.00"))
    teams_total = models.DecimalField(**MONEY)
    platform_total = models.DecimalField(**MONEY)
    closed_at = models.DateTimeField()
    # Finance closed the month although its metering is not complete (close_period
    # --accept-incomplete): why, and the ranges that were missing or short at the close.
    incomplete_reason = models.TextField(blank=True)
    incomplete_ranges = models.JSONField(default=list, blank=True)
    # The capacity of each GPU class in the month, exact GPU-seconds as text, by class name
    # ({"default": "..."} alone in a month without classes; empty for closes made before).
    capacity_gpu_seconds_by_class = models.JSONField(default=dict, blank=True)
    # What the month's windows could not show at the close, every GPU sample there all the
    # same (metering.selectors.BlindSpots): windows with inference pods that served without the
    # latency histogram (no SLA breach of theirs, rule 4), and windows and GPU-seconds of pods
    # kube-state-metrics did not describe (their task, team and kind guessed), and windows and
    # workloads Kueue preempted (no pod shows them, so no credit of rule 5 for them). Said,
    # never refused; 0 for closes made before they were counted.
    latency_unseen_windows = models.PositiveIntegerField(default=0, db_default=0)
    identity_guessed_windows = models.PositiveIntegerField(default=0, db_default=0)
    identity_guessed_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    kueue_preemption_windows = models.PositiveIntegerField(default=0, db_default=0)
    kueue_preempted_workloads = models.PositiveIntegerField(default=0, db_default=0)
    # Kueue's counts first read from a target Prometheus held no earlier scrape of: their
    # evictions could not be placed in time, so they are in no window's count.
    kueue_counts_unplaced = models.PositiveIntegerField(default=0, db_default=0)
    # Windows and GPU-seconds under priority classes the source did not map: counted as
    # training_batch.
    kind_guessed_windows = models.PositiveIntegerField(default=0, db_default=0)
    kind_guessed_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    # Windows and GPU-seconds in which GPUs no pod held were busy: work billed to no task.
    unheld_busy_windows = models.PositiveIntegerField(default=0, db_default=0)
    unheld_busy_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    # Services whose SLA breaches (rule 4) in the month were judged by the default SLO, which
    # nobody stated (intervals with at least the book's minimum of requests).
    slo_unstated_services = models.PositiveIntegerField(default=0, db_default=0)
    # Services rule 4 judged in the month whose namespace's inference pods ran, for an hour or
    # more, as another team than the one its credits go to, nobody having stated that team
    # (metering.selectors.services_team_moved). 0 for closes made before they were counted.
    services_team_moved = models.PositiveIntegerField(default=0, db_default=0)
    # Capacity GPU-seconds of GPU models no class of the book lists (gpu_model_key), in a
    # book with classes, and those models as metered: priced at `default`'s rates, as the
    # book says, but a spelling the book did not foresee prices an H100 as `default`, so it
    # is said. 0 and [] for closes made before they were counted, and in books without classes.
    unclassed_gpu_seconds = models.DecimalField(
        max_digits=18, decimal_places=6, default=0, db_default=0
    )
    unclassed_gpu_models = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-period"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(period__regex=PERIOD_REGEX), name="period_close_period_format"
            ),
            models.CheckConstraint(
                # Conservation, docs/pricing.md "Rounding": every cent of the pool is accounted for.
                condition=models.Q(
                    teams_total=models.F("pool_cost")
                    + models.F("pool_cost_corrections")
                    - models.F("platform_total")
                ),
                name="period_close_conserves_pool_cost",
            ),
            models.CheckConstraint(
                # An incomplete close always says why, and what it lacked.
                condition=(
                    models.Q(incomplete_reason="", incomplete_ranges=[])
                    | (~models.Q(incomplete_reason="") & ~models.Q(incomplete_ranges=[]))
                ),
                name="period_close_incomplete_has_reason_and_ranges",
            ),
        ]

    def __str__(self) -> str:
        return self.period

    @property
    def is_incomplete(self) -> bool:
        return bool(self.incomplete_reason)

    @property
    def has_blind_spots(self) -> bool:
        return bool(
            self.latency_unseen_windows
            or self.identity_guessed_windows
            or self.kueue_preemption_windows
            or self.kind_guessed_windows
            or self.unheld_busy_windows
            or self.slo_unstated_services
            or self.services_team_moved
            or self.unclassed_gpu_seconds
        )


class PeriodScenario(ImmutableModel):
    """The exact engine input behind a period, compressed canonical JSON.

    Revision 0 is the input the period was closed with. A later revision is the same month
    re-built from late data; `priced_in` is the close that carried its correction lines.
    """

    period = models.CharField(max_length=7)
    revision = models.PositiveIntegerField()
    priced_in = models.ForeignKey(PeriodClose, on_delete=models.PROTECT, related_name="scenarios")
    price_book = models.ForeignKey(PriceBook, on_delete=models.PROTECT, related_name="+")
    scenario_sha256 = models.CharField(max_length=64)
    pool_cost = models.DecimalField(**MONEY)
    scenario_zlib = models.BinaryField()
    created = models.DateTimeField()
    # The SLO in milliseconds (as text) each of its services was judged by, by the service's
    # primary key: the month's terms as of this revision. A rebuild of the month (corrections,
    # verification) is judged by the latest revision's, not by an SLO stated since; a service
    # new to the rebuild takes its own, kept by the revision that prices it. Empty for rows
    # made before they were kept: read from the scenario's text (billing.scenarios.judged_slos).
    service_slos = models.JSONField(default=dict, blank=True)
    # The kind each of its tasks was priced as, by the task's primary key: the month's kinds
    # as of this revision. A task row holds one kind, the one its latest ingest saw, so a
    # priority class changed in a later month (or on the admin's task page) would otherwise
    # re-price the closed month's whole usage of the task once late data re-builds it. A
    # task new to the rebuild takes its row's kind, kept by the revision that prices it.
    # Empty for rows made before they were kept: those rebuild from the task rows' kinds.
    task_kinds = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["period", "revision"]
        constraints = [
            models.UniqueConstraint(fields=["period", "revision"], name="scenario_revision_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.period} r{self.revision}"

    @staticmethod
    def compressor() -> zlib._Compress:
        """A compressor of scenario text fed piece by piece (`compress` in one piece): the
        same zlib stream however the text is cut."""
        # Level 1: a month of a large pool is hundreds of MB of JSON; speed beats ratio here.
        return zlib.compressobj(1)

    @staticmethod
    def compress(text: str) -> bytes:
        compressor = PeriodScenario.compressor()
        return compressor.compress(text.encode()) + compressor.flush()

    def scenario_text(self) -> str:
        return zlib.decompress(bytes(self.scenario_zlib)).decode()


class Statement(ImmutableModel):
    """One team's bill for one closed month: the sum of its rounded lines."""

    period_close = models.ForeignKey(
        PeriodClose, on_delete=models.PROTECT, related_name="statements"
    )
    period = models.CharField(max_length=7)
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="statements")
    currency = models.CharField(max_length=3)
    total = models.DecimalField(**MONEY)

    class Meta:
        ordering = ["period", "team__name"]
        constraints = [
            models.UniqueConstraint(fields=["period_close", "team"], name="statement_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.team}"


class StatementLine(ImmutableModel):
    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="lines")
    kind = models.CharField(max_length=16, choices=LineKind.choices)
    quantity_gpu_seconds = models.DecimalField(**EXACT, null=True, blank=True)
    quantity_gpu_hours = models.DecimalField(max_digits=20, decimal_places=2, null=True)
    rate_per_gpu_hour = models.DecimalField(**EXACT, null=True, blank=True)
    # Latency lines are counted in breached intervals (a team's share of each, for penalties).
    breached_intervals = models.DecimalField(**EXACT, null=True, blank=True)
    rate_per_interval = models.DecimalField(**EXACT, null=True, blank=True)
    amount_unrounded = models.DecimalField(**EXACT)
    amount = models.DecimalField(**MONEY)
    description = models.TextField()
    is_correction = models.BooleanField(default=False)
    corrects_period = models.CharField(max_length=7, blank=True)

    class Meta:
        ordering = ["statement", "is_correction", "corrects_period", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["statement", "kind", "is_correction", "corrects_period"],
                name="statement_line_unique",
            ),
            models.CheckConstraint(
                condition=models.Q(is_correction=False, corrects_period="")
                | models.Q(is_correction=True, corrects_period__regex=PERIOD_REGEX),
                name="statement_line_correction_names_period",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.statement} {self.kind} {self.amount}"

    @property
    def class_parts(self) -> list[StatementLineClass]:
        """The line's parts per GPU class when it has any but `default`, else none: a month
        priced in `default` alone reads as it did before classes (prefetch `classes`)."""
        parts = list(self.classes.all())
        if all(part.gpu_class == DEFAULT_GPU_CLASS for part in parts):
            return []
        return parts


class GpuClassPart(ImmutableModel):
    """The part of a line that one GPU class priced (docs/pricing.md "GPU classes"): a team
    line's (StatementLineClass) or a platform line's (PlatformLineClass).

    Exact, as the engine computes it: a line rounds the sum of its class parts once, so a
    part keeps no rounded amount of its own (reports that need one share the line's rounded
    amount out to the cent, reports.rows.apportion). Latency lines and corrections have none.
    """

    gpu_class = models.CharField(max_length=64)
    quantity_gpu_seconds = models.DecimalField(**EXACT)
    quantity_gpu_hours = models.DecimalField(max_digits=20, decimal_places=2)
    # The class's book rate on standard and off-peak lines; none on baseline and compensation,
    # whose amounts are shares of a reserve and lost work, not hours at a rate.
    rate_per_gpu_hour = models.DecimalField(**EXACT, null=True, blank=True)
    amount_unrounded = models.DecimalField(**EXACT)

    class Meta:
        abstract = True
        ordering = ["line", "gpu_class"]

    def __str__(self) -> str:
        return f"{self.line} {self.gpu_class}: {self.amount_unrounded}"


class StatementLineClass(GpuClassPart):
    """A team line's part in one GPU class (see GpuClassPart)."""

    line = models.ForeignKey(StatementLine, on_delete=models.PROTECT, related_name="classes")

    class Meta(GpuClassPart.Meta):
        verbose_name = "statement line class part"
        constraints = [
            models.UniqueConstraint(
                fields=["line", "gpu_class"], name="statement_line_class_unique"
            ),
            models.CheckConstraint(
                condition=~models.Q(gpu_class=""), name="statement_line_class_named"
            ),
        ]


class StatementLineTask(ImmutableModel):
    """What one task (or, for latency credits, one service) contributed to a line."""

    line = models.ForeignKey(StatementLine, on_delete=models.PROTECT, related_name="tasks")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, null=True, related_name="+")
    service = models.ForeignKey(Service, on_delete=models.PROTECT, null=True, related_name="+")
    gpu_seconds = models.DecimalField(**EXACT, null=True)
    amount_unrounded = models.DecimalField(**EXACT)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(task__isnull=False, service__isnull=True)
                | models.Q(task__isnull=True, service__isnull=False),
                name="line_contribution_names_task_or_service",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task or self.service}: {self.amount_unrounded}"


class StatementLineTaskClass(ImmutableModel):
    """The part of one task's contribution that one GPU class priced (docs/pricing.md "GPU
    classes"), exact; a contribution's parts sum to it. GPU-time lines only: latency lines
    and corrections have none. FOCUS names the task on each of a line's class rows with it."""

    contribution = models.ForeignKey(
        StatementLineTask, on_delete=models.PROTECT, related_name="classes"
    )
    gpu_class = models.CharField(max_length=64)
    gpu_seconds = models.DecimalField(**EXACT)
    amount_unrounded = models.DecimalField(**EXACT)

    class Meta:
        ordering = ["contribution", "gpu_class"]
        verbose_name = "contribution class part"
        constraints = [
            models.UniqueConstraint(
                fields=["contribution", "gpu_class"], name="line_contribution_class_unique"
            ),
            models.CheckConstraint(
                condition=~models.Q(gpu_class=""), name="line_contribution_class_named"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.contribution} {self.gpu_class}: {self.amount_unrounded}"


class PlatformLine(ImmutableModel):
    """One named part of the platform balance (docs/pricing.md rule 6)."""

    period_close = models.ForeignKey(
        PeriodClose, on_delete=models.PROTECT, related_name="platform_lines"
    )
    name = models.CharField(max_length=32, choices=PlatformLineName.choices)
    quantity_gpu_seconds = models.DecimalField(**EXACT, null=True, blank=True)
    rate_per_gpu_hour = models.DecimalField(**EXACT, null=True, blank=True)
    amount_unrounded = models.DecimalField(**EXACT)
    amount = models.DecimalField(**MONEY)
    description = models.TextField()
    is_correction = models.BooleanField(default=False)
    corrects_period = models.CharField(max_length=7, blank=True)

    class Meta:
        ordering = ["period_close", "is_correction", "corrects_period", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["period_close", "name", "is_correction", "corrects_period"],
                name="platform_line_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.period_close} {self.name} {self.amount}"

    @property
    def class_parts(self) -> list[PlatformLineClass]:
        """As StatementLine.class_parts: none when `default` alone priced it (prefetch
        `classes`)."""
        parts = list(self.classes.all())
        if all(part.gpu_class == DEFAULT_GPU_CLASS for part in parts):
            return []
        return parts


class PlatformLineClass(GpuClassPart):
    """A platform line's part in one GPU class, stored like a team line's (see GpuClassPart).
    Corrections have none."""

    line = models.ForeignKey(PlatformLine, on_delete=models.PROTECT, related_name="classes")

    class Meta(GpuClassPart.Meta):
        verbose_name = "platform line class part"
        constraints = [
            models.UniqueConstraint(
                fields=["line", "gpu_class"], name="platform_line_class_unique"
            ),
            models.CheckConstraint(
                condition=~models.Q(gpu_class=""), name="platform_line_class_named"
            ),
        ]


class SlaBreach(ImmutableModel):
    """An interval in which a service missed its P99 objective, listed even if no money moved."""

    period_close = models.ForeignKey(
        PeriodClose, on_delete=models.PROTECT, related_name="sla_breaches"
    )
    service = models.ForeignKey(Service, on_delete=models.PROTECT, related_name="+")
    interval_start = models.DateTimeField()
    request_count = models.DecimalField(max_digits=24, decimal_places=6)
    p99_seconds = models.DecimalField(**EXACT, null=True)
    slo_p99_ms = models.DecimalField(max_digits=16, decimal_places=3)
    is_peak = models.BooleanField()
    penalized = models.BooleanField(help_text="Money moved: peak interval with training running")

    class Meta:
        ordering = ["period_close", "service", "interval_start"]
        constraints = [
            models.UniqueConstraint(
                fields=["period_close", "service", "interval_start"], name="sla_breach_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.service} {self.interval_start:%Y-%m-%dT%H:%MZ}"


class Quota(models.Model):
    """What a team may use per month and at once; schedulers read it through the export."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="quota")
    allowance_gpu_hours = models.DecimalField(
        max_digits=16, decimal_places=2, null=True, blank=True
    )
    allowance_money = models.DecimalField(max_digits=16, decimal_places=2, null=True, blank=True)
    concurrent_gpu_cap = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    io_caps = models.JSONField(
        default=dict, blank=True, help_text='Operations per second per task kind: {"kind": n}'
    )
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["team__name"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    (Q(allowance_gpu_hours__isnull=True) | Q(allowance_gpu_hours__gte=0))
                    & (Q(allowance_money__isnull=True) | Q(allowance_money__gte=0))
                    & (Q(concurrent_gpu_cap__isnull=True) | Q(concurrent_gpu_cap__gte=0))
                ),
                name="quota_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"quota of {self.team}"

    def clean(self) -> None:
        from django.core.exceptions import ValidationError

        try:
            validate_io_caps(self.io_caps)
        except ValueError as error:
            raise ValidationError({"io_caps": str(error)}) from None


def validate_io_caps(io_caps: object) -> None:
    """`{kind: operations per second}` with known kinds and non-negative whole or decimal caps."""
    if not isinstance(io_caps, dict):
        raise ValueError("io_caps must be an object {task kind: operations per second}")
    kinds = set(TASK_KINDS)
    for kind, cap in io_caps.items():
        if kind not in kinds:
            raise ValueError(f"io_caps: unknown task kind {kind!r} (known: {sorted(kinds)})")
        if isinstance(cap, bool) or not isinstance(cap, int | str):
            raise ValueError(f"io_caps[{kind!r}]: a whole number or decimal string, got {cap!r}")
        try:
            value = Decimal(cap)
        except decimal.InvalidOperation:
            raise ValueError(f"io_caps[{kind!r}]: not a number: {cap!r}") from None
        if not value.is_finite() or value < 0:
            raise ValueError(f"io_caps[{kind!r}]: must be a non-negative number, got {cap!r}")


class MonthToDateDraft(models.Model):
    """The current month so far, priced as its close will price it: a cache, not a statement.

    `month_to_date_draft_refresh` writes it (one row per period, replaced in place) after
    ingestion; `quotas/export` reads it in one query. It prices whatever metering holds from
    the month's start to `as_of` with the book in force, with no completeness check, so its
    figures are a draft: nothing refers to it and a close never reads it. `data_version` says
    which metering state and book it priced; the export compares it with today's to say
    whether it is stale.
    """

    period = models.CharField(max_length=7, unique=True)
    data_version = models.CharField(max_length=200)
    as_of = models.DateTimeField(help_text="End of the metering data priced (UTC, exclusive)")
    computed_at = models.DateTimeField()
    price_book = models.ForeignKey(
        PriceBook, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    price_book_version = models.PositiveIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    scenario_sha256 = models.CharField(max_length=64, blank=True)
    # {team: {"total": "12.34", "lines": {kind: "1.23", ...}}}, rounded amounts as strings
    teams = models.JSONField(default=dict, blank=True)
    # Why the month so far could not be priced (e.g. usage above capacity), else empty.
    error = models.TextField(blank=True)
    # Each team's usage sums over the same range, as the export's live figures count them
    # ({team id: [GPU-seconds, GPU-seconds times rate]}), and what they depend on: a poll
    # adds only what was ingested after `as_of` while `usage_key` still matches.
    usage = models.JSONField(default=dict, blank=True)
    usage_key = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(period__regex=PERIOD_REGEX), name="month_to_date_draft_period"
            ),
        ]

    def __str__(self) -> str:
        return f"month-to-date draft of {self.period} up to {self.as_of:%Y-%m-%dT%H:%MZ}"
