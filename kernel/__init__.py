"""The rules every part of Tandem shares, each defined once, in plain Python.

Standard library only: no Django, no database, no clock, no settings. Pricing, ingestion,
billing, reports and the dashboards all call these functions, so a rule cannot drift between
them; callers pass in what the rule needs (the pool's time zone, a price book's cap).

Modules: `period` (a month "YYYY-MM" in a zone and its UTC range), `tasks` (task kinds),
`histogram` (latency histograms, Prometheus' quantile, the SLA breach test), `lost_work`
(work lost to a preemption), `money` (the one rounding rule), `price_book_fields` (the
fields of a price book and of its GPU classes). See docs/architecture.md "Kernel".
"""
