"""PromQL injection through a source's mapping, and through label values Prometheus itself
returns (pod names fed into the narrowed queries): values stay inside one string literal,
names that are not label or metric names are refused naming the field.

The proof of "inside one literal" is structural: the query built with a hostile value, with
that value's escaped form replaced by a harmless placeholder, is exactly the query built with
the placeholder. Every query is also parsed by Prometheus' own parser (`promtool check rules`),
so the escaping is valid PromQL and not just different text.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from metering import sources
from metering.models import Source

HOSTILE = [
    'prod"} or vector(1) or up{job="',
    'x\\"} or on() vector(1) #',
    "line\nbreak} or vector(1)",
    "back\\slash",
    "`backtick` and 'single' quotes",
    ".*|ends$",
]
PLACEHOLDER = "PLACEHOLDER"


def plan_with(**mapping: object) -> sources.QueryPlan:
    source = Source(name="hostile", url="http://127.0.0.1:9", label_mapping=mapping)
    return sources.query_plan_for(source, step_seconds=300)


def every_query(plan: sources.QueryPlan, pods: list[str]) -> list[str]:
    queries = [build(plan) for build in sources.METERS.values()]
    queries += [
        sources.tagged_parts(sources.pod_history_parts(plan, pods)),
        sources.tagged_parts(sources.pod_details_parts(plan, pods)),
        sources.preemption_ticks_query(plan, pods),
        sources.shared_devices_query(plan, pods),
        sources.pod_allocation_query(plan, namespace=pods[0], pod=pods[0]),
    ]
    return queries


def promtool_accepts(queries: list[str], tmp_path: Path) -> None:
    rules = {
        "groups": [
            {
                "name": "injection",
                "rules": [
                    {"record": f"tandem:query_{n}", "expr": q} for n, q in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def assert_one_literal(escaped: str, value: str) -> None:
    """`escaped` is the body of one double-quoted PromQL string (no bare quote, backslash or
    newline can end it early) and reads back as exactly `value`."""
    assert re.fullmatch(r'(?:[^"\\\n]|\\.)*', escaped), escaped
    assert json.loads(f'"{escaped}"') == value  # Go and JSON agree on \\ \" \n


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize("field", ["matchers", "preemption_reason", "gpu_resource"])
def test_it_keeps_a_hostile_mapping_value_inside_one_string(field, value, tmp_path):
    def mapping(text: str) -> dict:
        return {"matchers": {"cluster": text}} if field == "matchers" else {field: text}

    pods = ["ordinary-pod"]
    hostile = every_query(plan_with(**mapping(value)), pods)
    harmless = every_query(plan_with(**mapping(PLACEHOLDER)), pods)
    escaped = sources.escape_label_value(value)
    assert_one_literal(escaped, value)
    assert any(escaped in query for query in hostile)  # the value is really used
    assert [q.replace(escaped, PLACEHOLDER) for q in hostile] == harmless
    promtool_accepts(hostile, tmp_path)


@pytest.mark.parametrize("value", HOSTILE)
def test_it_keeps_hostile_pod_names_from_prometheus_inside_one_string(value, tmp_path):
    plan = plan_with()
    pods = [value, "ordinary-pod"]
    queries = every_query(plan, pods)
    promtool_accepts(queries, tmp_path)
    # The regex alternation escapes RE2 metacharacters: a pod named ".*" matches only itself.
    alternation = sources.regex_alternatives(pods)
    assert re.fullmatch(alternation, value) and not re.fullmatch(alternation, "any-other-pod")
    # Alone (no sorting against other names), every use of the name is one literal.
    alone = every_query(plan, [value])
    harmless = every_query(plan, [PLACEHOLDER])
    as_regex = sources.escape_label_value(sources.regex_alternatives([value]))
    as_value = sources.escape_label_value(value)
    assert_one_literal(as_value, value)
    assert_one_literal(as_regex, sources.regex_alternatives([value]))

    def neutral(query: str) -> str:
        return query.replace(as_regex, PLACEHOLDER).replace(as_value, PLACEHOLDER)

    assert [neutral(q) for q in alone] == harmless


@pytest.mark.parametrize(
    ("mapping", "named"),
    [
        ({"task_label": 'task"} or vector(1) #'}, "label_mapping.task_label"),
        ({"team_label": 'team=~".*"'}, "label_mapping.team_label"),
        ({"service_label": "svc) or vector(1"}, "label_mapping.service_label"),
        ({"fault_domain_label": "zone} or {a"}, "label_mapping.fault_domain_label"),
        ({"latency_histogram": "up or vector(1)"}, "label_mapping.latency_histogram"),
        ({"matchers": {'cluster="x"} or {a': "x"}}, "label_mapping.matchers"),
        ({"matchers": {"cluster": ["a", "b"]}}, "label_mapping.matchers"),
        ({"preemption_reason": ""}, "label_mapping.preemption_reason"),
    ],
)
def test_it_refuses_a_name_that_is_not_a_name(mapping, named):
    with pytest.raises(sources.SourceConfigurationError, match=re.escape(named)):
        plan_with(**mapping)


@pytest.mark.django_db
def test_it_refuses_an_injecting_mapping_in_the_admin(django_user_model):
    from django.test import Client
    from django.urls import reverse

    root = django_user_model.objects.create_superuser(username="root", password="x" * 20)
    client = Client()
    client.force_login(root)
    form = {
        "name": "injected",
        "url": "http://127.0.0.1:9090",
        "scrape_interval_seconds": "15",
        "label_mapping": '{"task_label": "task\\"} or vector(1) #"}',
        "priority_class_kinds": "{}",
        "max_concurrent_queries": "4",
        "enabled": "on",
    }
    response = client.post(reverse("admin:metering_source_add"), form)
    assert response.status_code == 200  # the form again, with the error
    assert "label_mapping.task_label must be a label name" in response.content.decode()
    assert not Source.objects.filter(name="injected").exists()
