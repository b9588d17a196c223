"""`manage.py ingest --source NAME --start ISO --end ISO [--now] [--no-shards]
[--accept-loss --reason TEXT]`: back-fill a source.

Queues the windows covering [start, end) as Celery tasks, several consecutive windows per
task (one range query per meter); with `--now` ingests them in this process instead. A window
whose stored rows came from more samples than Prometheus now has keeps them (with a warning);
`--accept-loss` replaces them anyway, and the audit log records who (the login running the
command) and why (`--reason`). A source with `shard_node_patterns` is measured in shards
(metering.shards), one task per shard, or one after the other with `--now`; `--no-shards`
measures each batch in one piece instead.
"""

from __future__ import annotations

import getpass
from dataclasses import asdict

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from metering import selectors, services, sources, tasks
from metering.management.commands._arguments import period
from metering.models import IngestWindow


class Command(BaseCommand):
    help = "Ingest (back-fill) a source's metering windows between --start and --end."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--source", required=True, help="source name, e.g. default")
        parser.add_argument("--start", required=True, help="ISO 8601 with zone")
        parser.add_argument("--end", required=True, help="ISO 8601 with zone")
        parser.add_argument("--now", action="store_true", help="ingest in this process")
        parser.add_argument(
            "--batch",
            type=int,
            default=settings.TANDEM_INGEST_BATCH_WINDOWS,
            help="consecutive windows per task (default 12); a task measures them in batches"
            " of one range query per meter, sized to the pool",
        )
        parser.add_argument(
            "--accept-loss",
            action="store_true",
            help="replace stored rows even where Prometheus now has fewer samples, or fewer of"
            " their pods described (audited)",
        )
        parser.add_argument("--reason", default="", help="why the loss is accepted (required)")
        parser.add_argument(
            "--no-shards",
            action="store_true",
            help="measure each batch in one piece even if the source shards its windows",
        )

    def handle(self, *args, **options) -> None:
        start, end = period(options["start"], options["end"])
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        accept_loss = None
        if options["accept_loss"] or options["reason"]:
            if not options["accept_loss"] or not options["reason"].strip():
                raise CommandError("--accept-loss and --reason go together: say why")
            accept_loss = services.LossAcceptance(
                operator=f"{getpass.getuser()} (manage.py ingest --accept-loss)",
                reason=options["reason"].strip(),
            )
        services.source_default_ensure()
        try:
            source = selectors.source_get(name=options["source"])
            windows = services.windows_create(source=source, start=start, end=end)
        except (selectors.UnknownSource, services.WindowError) as error:
            raise CommandError(str(error)) from None
        ids = [window.pk for window in windows]
        batches = [ids[i : i + options["batch"]] for i in range(0, len(ids), options["batch"])]
        if not options["now"]:
            for batch in batches:
                tasks.ingest_windows.delay_on_commit(
                    batch, asdict(accept_loss) if accept_loss else None, not options["no_shards"]
                )
            self.stdout.write(f"queued {len(ids)} windows of {source.name} in {len(batches)} tasks")
            return
        written, kept = 0, 0
        for number, batch in enumerate(batches, start=1):
            try:
                done = services.windows_ingest(
                    window_ids=batch, accept_loss=accept_loss, sharded=not options["no_shards"]
                )
            except sources.PrometheusUnavailable as error:
                raise CommandError(
                    f"Prometheus unavailable, windows left pending: {error}"
                ) from None
            written += sum(window.rows_written for window in done)
            kept += sum(1 for window in done if _kept_stored_rows(window))
            if options["verbosity"] >= 2:
                for window in done:
                    self.stdout.write(
                        f"{window.start:%Y-%m-%dT%H:%M:%SZ} {window.status}"
                        f" rows={window.rows_written} completeness={window.completeness}"
                        + (f" error={window.error}" if window.error else "")
                    )
            elif options["verbosity"] == 1 and (number % 50 == 0 or number == len(batches)):
                # one progress line every 50 batches: a month is thousands of windows
                self.stdout.write(
                    f"ingested {min(number * options['batch'], len(ids))}/{len(ids)} windows"
                    f" up to {done[-1].end:%Y-%m-%d %H:%M} UTC, {written} rows"
                )
        if kept:
            self.stdout.write(
                f"warning: {kept} windows kept their stored rows: Prometheus now has fewer of"
                " their samples, or kube-state-metrics describes fewer of their pods (see each"
                " window's warning); --accept-loss --reason TEXT replaces them"
            )
        # One query: a month is thousands of windows (one refresh each took minutes).
        failed = IngestWindow.objects.filter(pk__in=ids, status=IngestWindow.Status.FAILED).count()
        if failed:
            raise CommandError(f"{failed} windows failed; see their error in the admin")


def _kept_stored_rows(window) -> bool:
    return bool(window.warnings) and str(window.warnings[0]).startswith(services.LOSS_REFUSED)
