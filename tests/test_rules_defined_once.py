"""Each shared rule is defined once, in `kernel/` (docs/architecture.md "Kernel").

These tests read the source tree (not tests, migrations, docs or the virtualenv) and fail when
a module restates a rule the kernel owns: a second rounding constant, month regex, list of
task kinds or price-book fields, spelling of `+Inf`, quantile, lost-work formula, SLA breach
test on a stored P99 or beat schedule. The simulator is left out on purpose: it plays the
exporters and computes the ground truth the tests compare Tandem with, so it must not share
Tandem's code.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from kernel.price_book_fields import GPU_CLASS_FIELDS, PRICE_BOOK_FIELDS
from kernel.tasks import TASK_KINDS

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRECTORIES = {".venv", "migrations", "tests", "docs", "simulator", "var", "node_modules"}
# A month "YYYY-MM" as a regular expression: four digits, a dash, and a two-digit month not
# followed by a day (`\d{4}-\d{2}-\d{2}` is a date, not a period).
MONTH_REGEX = re.compile(r"\{4\}\)?-\(?(\\d\{2\}|\[0-9\]\{2\}|0\[1-9\]\|1\[0-2\])(?!-)")
BOOK_FIELD_NAMES = set(PRICE_BOOK_FIELDS) | set(GPU_CLASS_FIELDS) - {"name", "models"}


@cache
def source_files() -> tuple[Path, ...]:
    files = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = set(path.relative_to(ROOT).parts[:-1])
        if not parts & SKIPPED_DIRECTORIES:
            files.append(path)
    return tuple(files)


@cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def name_of(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def string_constants(node: ast.AST) -> Iterator[str]:
    for child in ast.walk(node):
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            yield child.value


def literal_strings(node: ast.AST) -> list[str]:
    """The string elements of a tuple, list or set literal, or the string keys of a dict."""
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items = node.elts
    elif isinstance(node, ast.Dict):
        items = [key for key in node.keys if key is not None]
    else:
        return []
    return [item.value for item in items if isinstance(item, ast.Constant)]


def is_data(node: ast.AST) -> bool:
    """A dict of constant values (a book's figures, such as the default book's) is data, not
    a list of fields; a dict that reads its values from an object restates the fields."""
    if not isinstance(node, ast.Dict):
        return False
    try:
        ast.literal_eval(node)
    except ValueError:
        return False
    return True


def modules_where(found: callable) -> list[str]:
    return sorted({name_of(path) for path in source_files() if found(parsed(path))})


def uses_name(tree: ast.Module, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == name:
            return True
        if isinstance(node, ast.Attribute) and node.attr == name:
            return True
        if isinstance(node, ast.alias) and node.name == name:
            return True
    return False


def defines_function(tree: ast.Module, names: set[str]) -> bool:
    return any(isinstance(node, ast.FunctionDef) and node.name in names for node in ast.walk(tree))


def calls(tree: ast.Module, names: set[str]) -> list[ast.Call]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            called = function.id if isinstance(function, ast.Name) else None
            if isinstance(function, ast.Attribute):
                called = function.attr
            if called in names:
                found.append(node)
    return found


def test_it_scans_the_apps_and_the_kernel():
    names = {name_of(path) for path in source_files()}
    assert {"kernel/period.py", "billing/pricing/engine.py", "reports/rows.py"} <= names
    assert not any(name.startswith(("tests/", "simulator/")) for name in names)


def test_it_rounds_with_one_rule():
    assert modules_where(lambda tree: uses_name(tree, "ROUND_HALF_UP")) == ["kernel/money.py"]


def test_it_defines_the_month_pattern_once():
    def has_month_regex(tree: ast.Module) -> bool:
        return any(MONTH_REGEX.search(text) for text in string_constants(tree))

    assert modules_where(has_month_regex) == ["kernel/period.py"]


def test_it_turns_a_period_into_its_utc_range_once():
    def builds_a_month_start(tree: ast.Module) -> bool:
        # datetime(year, month, 1, tzinfo=zone): the first local midnight of some month.
        return any(
            len(call.args) >= 3
            and not isinstance(call.args[1], ast.Constant)
            and isinstance(call.args[2], ast.Constant)
            and call.args[2].value == 1
            and any(keyword.arg == "tzinfo" for keyword in call.keywords)
            for call in calls(tree, {"datetime"})
        )

    def formats_a_period(tree: ast.Module) -> bool:
        return any(re.search(r"%Y-%m(?!-)", text) for text in string_constants(tree))

    assert modules_where(builds_a_month_start) == ["kernel/period.py"]
    assert modules_where(formats_a_period) == ["kernel/period.py"]


def test_it_reads_time_zones_in_one_place():
    assert modules_where(lambda tree: bool(calls(tree, {"ZoneInfo"}))) == ["kernel/period.py"]


def test_it_lists_task_kinds_once():
    def lists_kinds(tree: ast.Module) -> bool:
        return any(
            len(set(literal_strings(node)) & set(TASK_KINDS)) >= 2 for node in ast.walk(tree)
        )

    assert modules_where(lists_kinds) == ["kernel/tasks.py"]


def test_it_lists_price_book_fields_once():
    def lists_fields(tree: ast.Module) -> bool:
        return any(
            len(set(literal_strings(node)) & BOOK_FIELD_NAMES) >= 3 and not is_data(node)
            for node in ast.walk(tree)
        )

    assert modules_where(lists_fields) == ["kernel/price_book_fields.py"]


def test_it_reads_histograms_and_their_quantile_once():
    def spells_infinity(tree: ast.Module) -> bool:
        return any({"Inf", "+inf"} <= set(literal_strings(node)) for node in ast.walk(tree))

    def defines_quantile(tree: ast.Module) -> bool:
        names = {"histogram_quantile", "exceeds_objective", "interval_breached", "merge_buckets"}
        return defines_function(tree, names | {"parse_buckets", "merge_histograms"})

    assert modules_where(spells_infinity) == ["kernel/histogram.py"]
    assert modules_where(defines_quantile) == ["kernel/histogram.py"]


def test_it_computes_lost_work_once():
    def restates_lost_work(tree: ast.Module) -> bool:
        return any(
            "seconds_since_start" in ast.dump(call) for call in calls(tree, {"min", "Least"})
        ) or defines_function(tree, {"lost_gpu_seconds"})

    assert modules_where(restates_lost_work) == ["kernel/lost_work.py"]


COMPARISONS = {"GreaterThan", "GreaterThanOrEqual", "LessThan", "LessThanOrEqual"}
COMPARISONS |= {"gt", "ge", "lt", "le"}
# `request_count >= ...` or `p99_seconds * 1000` spelled in raw SQL.
BREACH_SQL = re.compile(r"request_count\s*(>=|<)\s*[%:$\w]|p99_seconds\s*\*\s*1000", re.IGNORECASE)


def compared(node: ast.AST) -> list[str]:
    """The operands of a comparison (`a > b`, `GreaterThan(a, b)`, `operator.gt(a, b)`),
    each as its AST dump; nothing when the node compares nothing."""
    if isinstance(node, ast.Compare):
        return [ast.dump(operand) for operand in [node.left, *node.comparators]]
    if isinstance(node, ast.Call) and calls(ast.Module(body=[ast.Expr(node)]), COMPARISONS):
        return [ast.dump(argument) for argument in node.args]
    return []


def restates_sla_breach(tree: ast.Module) -> bool:
    """A P99 in seconds compared with an objective, a request count compared with the
    minimum (also as `request_count__gte=` or in SQL text), or a second definition of the
    kernel's test."""
    for node in ast.walk(tree):
        operands = compared(node)
        objective = [text for text in operands if "slo_p99_ms" in text]
        others = [text for text in operands if "slo_p99_ms" not in text]
        # A P99 in seconds turned into milliseconds; a period's P99 already in milliseconds
        # against its objective (`ServiceLatency.meets_slo`) is another rule, with no minimum.
        if objective and any("p99" in text and "value=1000" in text for text in others):
            return True
        minimum = [text for text in operands if "min_requests" in text]
        if minimum and any("request" in text and "min_requests" not in text for text in operands):
            return True
        if isinstance(node, ast.keyword) and (node.arg or "").startswith("request_count__"):
            return True
    if any(BREACH_SQL.search(text) for text in string_constants(tree)):
        return True
    return defines_function(tree, {"p99_breached", "enough_requests"})


def test_it_tests_an_sla_breach_on_a_stored_p99_once():
    assert modules_where(restates_sla_breach) == ["kernel/breach.py"]


def test_it_finds_a_copy_of_the_breach_test_when_one_is_added():
    copies = [
        "Q(request_count__gte=min_requests) & GreaterThan(F('p99_seconds') * 1000, F('slo'))",
        "GreaterThan(F('p99_seconds') * 1000, Value(service.slo_p99_ms))",
        "breached = requests >= min_requests and p99 * 1000 > service.slo_p99_ms",
        "breached += p99 is not None and p99 * 1000 > slo_p99_ms",
        "rows.filter(GreaterThanOrEqual(F('request_count'), min_requests))",
        "SQL = 'SELECT count(*) FROM l WHERE request_count >= %s AND p99_seconds * 1000 > s'",
    ]
    for copy in copies:
        assert restates_sla_breach(ast.parse(copy)), copy


def test_it_schedules_beat_in_one_place():
    def schedules(tree: ast.Module) -> bool:
        return uses_name(tree, "CELERY_BEAT_SCHEDULE") or uses_name(tree, "beat_schedule")

    assert modules_where(schedules) == ["config/settings.py"]


def test_it_finds_a_copy_when_one_is_added():
    copy = ast.parse('PATTERN = r"^(\\d{4})-(0[1-9]|1[0-2])$"\nfrom decimal import ROUND_HALF_UP\n')
    assert any(MONTH_REGEX.search(text) for text in string_constants(copy))
    assert uses_name(copy, "ROUND_HALF_UP")


def test_it_keeps_the_kernel_free_of_django():
    code = (
        "import sys, importlib, pkgutil, kernel\n"
        "for module in pkgutil.iter_modules(kernel.__path__):\n"
        "    importlib.import_module(f'kernel.{module.name}')\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'django'))\n"
    )
    answer = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert answer.stdout.strip() == "[]"


def test_it_holds_the_garbage_collector_in_one_place():
    """Ingest and the close both pause the cyclic collector; the nesting rule is the
    kernel's (kernel/collector.py), so a second pause never re-enables it early."""
    assert modules_where(lambda tree: bool(calls(tree, {"disable", "enable"}))) == [
        "kernel/collector.py"
    ]


def test_it_reads_whole_numbers_from_text_in_one_place():
    """`str.isdigit()` also accepts "¹", which `int()` refuses: a query string's id, a port or
    a MIG slice count is read by kernel/numbers.py, so none answers a 500."""
    assert modules_where(lambda tree: bool(calls(tree, {"isdigit"}))) == ["kernel/numbers.py"]
