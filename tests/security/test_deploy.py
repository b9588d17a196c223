"""`manage.py check --deploy` is clean with production settings; debug stays easy to run."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys

from django.conf import settings

from config import settings as config_settings
from tests.conftest import REPO

PRODUCTION = {
    "TANDEM_DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(64),
    "ALLOWED_HOSTS": "tandem.example.com",
}


def manage(*args: str, **overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **overrides},
        capture_output=True,
        text=True,
        timeout=120,
    )


def setting(name: str, **overrides: str) -> str:
    result = manage(
        "shell",
        "--no-imports",
        "-c",
        f"from django.conf import settings; print(settings.{name})",
        **overrides,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_it_passes_the_deploy_check_with_production_settings() -> None:
    result = manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_it_fails_the_deploy_check_with_a_weak_key() -> None:
    # The check above can fail: a short key is reported (security.W009).
    result = manage(
        "check", "--deploy", "--fail-level", "WARNING", **{**PRODUCTION, "SECRET_KEY": "short"}
    )
    assert result.returncode != 0
    assert "security.W009" in result.stdout + result.stderr


def test_it_turns_the_redirect_off_for_a_tls_terminating_proxy() -> None:
    overrides = {**PRODUCTION, "TANDEM_SECURE_SSL_REDIRECT": "0"}
    assert setting("SECURE_SSL_REDIRECT", **overrides) == "False"
    assert setting("SECURE_PROXY_SSL_HEADER", **overrides) == "('HTTP_X_FORWARDED_PROTO', 'https')"
    assert setting("SESSION_COOKIE_SECURE", **overrides) == "True"


def test_it_runs_the_tests_with_debug_and_plain_http() -> None:
    # pytest-django turns settings.DEBUG off itself; the module's own value is the default.
    assert config_settings.DEBUG
    assert not settings.SECURE_SSL_REDIRECT
    assert not settings.SESSION_COOKIE_SECURE
    assert settings.SECURE_HSTS_SECONDS == 0


def test_it_sends_hsts_and_secure_cookies_in_production() -> None:
    code = (
        "from django.test import Client; "
        "r = Client().get('/accounts/login/', secure=True, HTTP_HOST='tandem.example.com'); "
        "print(r.status_code, r.headers.get('Strict-Transport-Security'), "
        "r.cookies['csrftoken']['secure']); "
        "r = Client().get('/accounts/login/', HTTP_HOST='tandem.example.com'); "
        "print(r.status_code, r.headers.get('Location'))"
    )
    result = manage("shell", "--no-imports", "-c", code, **PRODUCTION)
    assert result.returncode == 0, result.stderr
    secure, plain = result.stdout.strip().splitlines()
    assert secure == "200 max-age=31536000; includeSubDomains; preload True"
    assert plain == "301 https://tandem.example.com/accounts/login/"
