"""Operators state SLOs, which the telemetry does not carry."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from metering.models import Service, Source, Team


@pytest.mark.django_db
def test_it_sets_a_services_slo_and_refuses_unknown_services() -> None:
    source = Source.objects.create(name="s", url="http://127.0.0.1:9")
    team = Team.objects.create(name="chat")
    Service.objects.create(source=source, external_id="chat/llm", team=team, slo_p99_ms=1000)

    call_command("set_slo", "--service", "chat/llm", "--p99-ms", "2500")

    assert Service.objects.get(external_id="chat/llm").slo_p99_ms == 2500
    with pytest.raises(CommandError, match="no service named 'chat/ghost'"):
        call_command("set_slo", "--service", "chat/ghost", "--p99-ms", "100")
    with pytest.raises(CommandError, match="slo_p99_ms must be a positive"):
        call_command("set_slo", "--service", "chat/llm", "--p99-ms", "0")
