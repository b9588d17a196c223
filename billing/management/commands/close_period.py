"""`close_period --period YYYY-MM [--accept-incomplete REASON]`: price a month and store its
statements (idempotent). A month whose metering is missing or short is refused, naming the
ranges, unless finance accepts it incomplete with a reason."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from billing.pricing import ScenarioError
from billing.selectors import GPUS_UNRECORDED, PREEMPTIONS_UNSEEN, PriceBookNotFound
from billing.services import BillingError, PeriodCloseRefused, period_close


class Command(BaseCommand):
    help = "Close a month (pool time zone): price it with the book in force, store statements."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--period", required=True, help="YYYY-MM, in the pool's time zone")
        parser.add_argument(
            "--no-corrections",
            action="store_true",
            help="do not look for late data in earlier closed months",
        )
        parser.add_argument(
            "--recheck",
            action="append",
            default=[],
            metavar="YYYY-MM",
            help="re-build this earlier closed month even if no ingest window flags late data",
        )
        parser.add_argument(
            "--retake-kinds",
            action="append",
            default=[],
            metavar="YYYY-MM",
            help="re-build this earlier closed month (as --recheck) taking each task's kind from"
            " its row now, not the kind the month was priced with: where a priority class the"
            " source did not map was mapped since and its windows ingested again (audited)",
        )
        parser.add_argument(
            "--accept-incomplete",
            default="",
            metavar="REASON",
            help="close although metering is missing, short or without preemptions (the data"
            " will never come);"
            " the reason and the ranges are recorded on the close, shown and audited",
        )

    def handle(
        self,
        *args,
        period: str,
        no_corrections: bool,
        recheck: list[str],
        retake_kinds: list[str],
        accept_incomplete: str,
        **options,
    ):
        try:
            outcome = period_close(
                period=period,
                corrections=not no_corrections,
                recheck=recheck,
                retake_kinds=retake_kinds,
                accept_incomplete=accept_incomplete,
            )
        except PeriodCloseRefused as error:
            reasons = "\n".join(f"  - {reason}" for reason in error.reasons)
            hint = ""
            if error.incomplete and len(error.incomplete) == len(error.reasons):
                hint = (
                    "\ningest those ranges again once their data is back; if it never will,"
                    ' close with --accept-incomplete "reason"'
                )
            raise CommandError(f"period {period} cannot be closed:\n{reasons}{hint}") from None
        except (BillingError, ScenarioError, PriceBookNotFound, ValueError) as error:
            raise CommandError(str(error)) from None
        close = outcome.period_close
        if not outcome.created:
            message = f"{period} was already closed at {close.closed_at:%Y-%m-%d %H:%M:%S %Z}"
            if outcome.data_changed:
                message += "; its metering data changed since: the next close adds correction lines"
            self.stdout.write(message + "; nothing changed.")
            return
        self.stdout.write(
            f"closed {period}: pool cost {close.pool_cost} {close.currency}, teams "
            f"{close.teams_total}, platform {close.platform_total} (price book "
            f"v{close.price_book_version}, engine {close.engine_version}, scenario "
            f"sha256 {close.scenario_sha256})"
        )
        if close.is_incomplete:
            ranges = close.incomplete_ranges
            unseen = sum(1 for item in ranges if item.get("problem") == PREEMPTIONS_UNSEEN)
            unrecorded = sum(1 for item in ranges if item.get("problem") == GPUS_UNRECORDED)
            short = len(ranges) - unseen - unrecorded
            what = [f"{short} ranges missing or short"] if short else []
            what += [f"{unseen} without preemptions"] if unseen else []
            what += [f"{unrecorded} with their GPUs unrecorded"] if unrecorded else []
            self.stdout.write(
                f"closed INCOMPLETE ({', '.join(what)}), accepted: {close.incomplete_reason}"
            )
        blind = outcome.blind_spots
        if blind.latency_unseen_windows:
            self.stdout.write(
                f"note: {blind.latency_unseen_windows} windows have inference pods that served"
                " without the latency histogram: no SLA breach of theirs (pricing rule 4) is in"
                " this close; the windows' warnings name them"
            )
        if blind.identity_guessed_windows:
            self.stdout.write(
                f"note: {blind.identity_guessed_windows} windows hold"
                f" {blind.identity_guessed_gpu_seconds} GPU-seconds of pods kube-state-metrics"
                " did not describe: their task, team and kind are guesses; the windows'"
                " warnings name them"
            )
        if blind.kueue_preempted_workloads:
            self.stdout.write(
                f"note: Kueue preempted {blind.kueue_preempted_workloads} workloads in"
                f" {blind.kueue_preemption_windows} windows: no pod shows them preempted, so"
                " rule 5 (starvation credits) counted none of them in this close; the windows'"
                " warnings name their cluster queues"
            )
        if blind.kueue_counts_unplaced:
            self.stdout.write(
                f"note: {blind.kueue_counts_unplaced} of Kueue's counts were first read from a"
                " target Prometheus held no earlier scrape of: when their evictions happened"
                " cannot be told, so they are in no window's count; the windows' warnings"
                " name them"
            )
        if blind.kind_guessed_windows:
            self.stdout.write(
                f"note: {blind.kind_guessed_windows} windows hold"
                f" {blind.kind_guessed_gpu_seconds} GPU-seconds under priority classes the"
                " source does not map: counted as training_batch; the windows' warnings name"
                " the classes (map them in the source's priority_class_kinds)"
            )
        if blind.unheld_busy_windows:
            self.stdout.write(
                f"note: in {blind.unheld_busy_windows} windows GPUs no pod held were busy"
                f" {blind.unheld_busy_gpu_seconds} GPU-seconds: work outside any pod's GPU"
                " request, billed to no task; the windows' warnings name the GPUs and nodes"
            )
        if blind.slo_unstated_services:
            self.stdout.write(
                f"note: {blind.slo_unstated_services} service(s) had their SLA breaches (rule 4)"
                " judged by the default SLO, which nobody stated; state each (set_slo, or the"
                " admin's services: SLO, the default)"
            )
        if close.unclassed_gpu_seconds:
            self.stdout.write(
                f"note: {close.unclassed_gpu_seconds} capacity GPU-seconds of GPU models no"
                f" class of price book v{close.price_book_version} lists, priced at the default"
                f" class's rates: {', '.join(close.unclassed_gpu_models)} (list them in a class"
                " of the next book if they are a class's)"
            )
        for statement in close.statements.select_related("team"):
            self.stdout.write(f"  {statement.team.name}: {statement.total}")
        if outcome.corrected_periods:
            self.stdout.write("corrections of: " + ", ".join(outcome.corrected_periods))
        if outcome.corrections_withheld:
            self.stdout.write(
                "corrections withheld (windows below the completeness required, or GPUs"
                " metered by two sources): " + ", ".join(outcome.corrections_withheld)
            )
