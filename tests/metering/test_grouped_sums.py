"""Sums grouped in Python (`measure._grouped`) add one scrape target's series per group and
point: a second target answering for the same pod is the same exporter scraped twice."""

from __future__ import annotations

from datetime import UTC, datetime

from metering import measure, sources

AT = datetime(2026, 10, 5, tzinfo=UTC)
KUBELET = {"job": "kubelet", "instance": "10.42.0.11:10250"}
AGAIN = {"job": "kubelet-again", "instance": "10.42.0.11:10250"}
POD = {"namespace": "ads", "pod": "vllm-0"}


def run(*series: tuple[dict[str, str], list[list]]) -> sources.QueryRun:
    found = [sources.Series(labels=labels, values=values) for labels, values in series]
    return sources.QueryRun("io", "", AT, AT, 0.0, 0.0, found)


def summed(result: sources.QueryRun) -> sources.QueryRun:
    part = sources.Part("", ("namespace", "pod"), "sum")
    return measure._grouped(result, "read_operations", part)


def test_it_adds_the_series_of_one_target() -> None:
    grouped = summed(
        run(
            ({**POD, **KUBELET, "container": "vllm"}, [[300, "5"], [600, "7"]]),
            ({**POD, **KUBELET, "container": "sidecar"}, [[300, "1"], [600, "2"]]),
        )
    )
    assert [series.values for series in grouped.series] == [[[300, "6"], [600, "9"]]]
    assert grouped.repeated == ()


def test_it_counts_a_pod_scraped_by_two_jobs_once_and_says_so() -> None:
    grouped = summed(
        run(
            ({**POD, **AGAIN, "container": "vllm"}, [[300, "5"], [600, "7"]]),
            ({**POD, **KUBELET, "container": "vllm"}, [[300, "5"], [600, "8"]]),
            ({**POD, **KUBELET, "container": "sidecar"}, [[300, "1"], [600, "2"]]),
        )
    )
    # The first target by name, "kubelet", at each point; its two containers added.
    assert [series.values for series in grouped.series] == [[[300, "6"], [600, "10"]]]
    example = (
        '{namespace="ads",pod="vllm-0"} from job="kubelet" instance="10.42.0.11:10250"'
        ' and job="kubelet-again" instance="10.42.0.11:10250"'
    )
    assert grouped.repeated == ((300, 1, example), (600, 1, example))


def test_it_takes_each_point_from_the_target_that_answered_it() -> None:
    """A kube-state-metrics replica that stops and another that carries on: no point is lost."""
    first = {"job": "kube-state-metrics", "instance": "10.42.0.5:8080"}
    second = {"job": "kube-state-metrics", "instance": "10.42.0.6:8080"}
    grouped = summed(
        run(
            ({**POD, **first}, [[300, "4"]]),
            ({**POD, **second}, [[600, "4"], [900, "4"]]),
        )
    )
    assert [series.values for series in grouped.series] == [[[300, "4"], [600, "4"], [900, "4"]]]
    assert grouped.repeated == ()


def test_it_leaves_a_maximum_of_two_targets_as_it_was() -> None:
    part = sources.Part("", ("namespace", "pod"), "max")
    grouped = measure._grouped(
        run(({**POD, **KUBELET}, [[300, "3"]]), ({**POD, **AGAIN}, [[300, "9"]])), "peak", part
    )
    assert [series.values for series in grouped.series] == [[[300, "9"]]]
