"""The node sets of a sharded source partition the pool: whatever the patterns, every GPU
exporter series (either spelling of its node label, or none) is read by exactly one shard."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metering import shards, sources
from metering.models import Source

MATCHER = re.compile(r'(\w+)(=~|!~|!=|=)"((?:[^"\\]|\\.)*)"')


def plan(patterns: list[str]) -> list[sources.QueryPlan]:
    base = sources.query_plan_for(Source(name="s", url="http://x"), step_seconds=300)
    return shards.shard_plans(patterns, base)


def selected(selector: str, labels: dict[str, str]) -> bool:
    """Whether a selector's matchers hold for a series' labels, as Prometheus evaluates
    them (regular expressions anchored; a missing label is the empty string)."""
    body = selector[selector.index("{") + 1 : selector.rindex("}")]
    for name, operator, quoted in MATCHER.findall(body):
        value = quoted.replace('\\"', '"').replace("\\\\", "\\")
        have = labels.get(name, "")
        held = {
            "=": have == value,
            "!=": have != value,
            "=~": re.fullmatch(value, have) is not None,
            "!~": re.fullmatch(value, have) is None,
        }[operator]
        if not held:
            return False
    return True


def shards_reading(plans: list[sources.QueryPlan], labels: dict[str, str]) -> list[int]:
    return [
        index
        for index, shard in enumerate(plans)
        for selector in sources.gpu_series(shard, "DCGM_FI_DEV_FB_USED")
        if selected(selector, labels)
    ]


def test_it_reads_every_series_in_one_piece_without_shards() -> None:
    (whole,) = sources.gpu_series(
        sources.query_plan_for(Source(name="s", url="http://x"), step_seconds=300),
        "DCGM_FI_DEV_FB_USED",
    )
    assert whole == "DCGM_FI_DEV_FB_USED"


def test_it_narrows_each_shard_to_its_nodes_by_either_spelling() -> None:
    rest, first, second = plan(["gpu-a-.*", "gpu-b-.*"])
    assert sources.gpu_series(second, "DCGM_FI_DEV_FB_USED") == (
        'DCGM_FI_DEV_FB_USED{Hostname!="",Hostname=~"gpu-b-.*",Hostname!~"(?:gpu-a-.*)"}',
        'DCGM_FI_DEV_FB_USED{Hostname="",hostname=~"gpu-b-.*",hostname!~"(?:gpu-a-.*)"}',
    )
    assert rest.meters == first.meters == second.meters == sources.DEVICE_METERS
    assert shards_reading([rest, first, second], {"Hostname": "gpu-b-7"}) == [2]
    assert shards_reading([rest, first, second], {"hostname": "gpu-a-1"}) == [1]
    assert shards_reading([rest, first, second], {"hostname": "cpu-1"}) == [0]
    assert shards_reading([rest, first, second], {}) == [0]


@given(
    patterns=st.lists(st.sampled_from(["n1", "n.", "n[12]", ".*", "m.*", "n1|m2", ""]), max_size=4),
    node=st.sampled_from(["n1", "n2", "m2", "m", "", "x"]),
    spelling=st.sampled_from(["Hostname", "hostname", None]),
)
def test_it_gives_every_series_to_exactly_one_shard(patterns, node, spelling) -> None:
    patterns = list(dict.fromkeys(p for p in patterns if p))
    labels = {spelling: node} if spelling else {}
    assert len(shards_reading(plan(patterns), labels)) == 1


@pytest.mark.parametrize(
    ("patterns", "message"),
    [
        ("gpu-.*", "must be a list"),
        ([""], "a pattern is empty"),
        (["gpu-("], "is not a regular expression"),
        (["a", "a"], "listed twice"),
    ],
)
def test_it_refuses_unusable_shard_patterns(patterns, message) -> None:
    with pytest.raises(sources.SourceConfigurationError, match=message):
        plan(patterns)
