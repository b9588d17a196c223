"""The scenario's digest (its canonical text compressed, and its SHA-256) is taken in a forked
process while this one prices: the same bytes as taken here, a failing child named, and no
child left behind when pricing fails."""

from __future__ import annotations

import os
import zlib

import pytest

from billing import scenarios
from billing.scenarios import BuiltScenario, ScenarioDigestError, scenario_build, scenario_price
from billing.selectors import period_bounds, price_book_in_force

pytestmark = pytest.mark.django_db


@pytest.fixture
def september(boundary_pool) -> BuiltScenario:
    bounds = period_bounds("2026-09")
    book = price_book_in_force(bounds.first_day)
    return scenario_build(start=bounds.start, end=bounds.end, price_book=book)


@pytest.fixture
def forks(monkeypatch) -> list[int]:
    """The pids of the children the digest forks."""
    pids: list[int] = []
    fork = os.fork

    def recorded() -> int:
        pid = fork()
        if pid:
            pids.append(pid)
        return pid

    monkeypatch.setattr(scenarios.os, "fork", recorded)
    return pids


def reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_it_takes_the_same_digest_in_a_child_as_here(september, forks, settings) -> None:
    settings.TANDEM_SCENARIO_DIGEST_FORKED = True
    forked = scenario_price(september)
    settings.TANDEM_SCENARIO_DIGEST_FORKED = False
    here = scenario_price(september)

    assert len(forks) == 1 and reaped(forks[0])
    assert forked.sha256 == here.sha256 == scenarios.scenario_digest(september)[1]
    assert zlib.decompress(forked.scenario_zlib) == zlib.decompress(here.scenario_zlib)
    assert forked.result == here.result


def test_it_names_what_failed_in_the_child(september, forks, settings, monkeypatch) -> None:
    settings.TANDEM_SCENARIO_DIGEST_FORKED = True

    def broken(built: BuiltScenario) -> tuple[bytes, str]:
        raise MemoryError("no room for the scenario text")

    monkeypatch.setattr(scenarios, "scenario_digest", broken)  # the child inherits it
    with pytest.raises(ScenarioDigestError, match="MemoryError: no room for the scenario text"):
        scenario_price(september)
    assert reaped(forks[0])


def test_it_leaves_no_child_when_pricing_fails(september, forks, settings, monkeypatch) -> None:
    settings.TANDEM_SCENARIO_DIGEST_FORKED = True

    def refused(scenario: object) -> None:
        raise scenarios.ScenarioError("usage above capacity")

    monkeypatch.setattr(scenarios, "price", refused)
    with pytest.raises(scenarios.ScenarioError, match="usage above capacity"):
        scenario_price(september)
    assert len(forks) == 1 and reaped(forks[0])


def test_it_digests_here_with_the_setting_off(september, forks, settings) -> None:
    settings.TANDEM_SCENARIO_DIGEST_FORKED = False
    priced = scenario_price(september)
    assert not forks
    assert priced.sha256 == scenarios.scenario_digest(september)[1]
