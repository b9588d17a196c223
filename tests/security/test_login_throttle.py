"""Login is throttled per username and client address, on the login page and the admin's."""

from __future__ import annotations

import pytest
from django.contrib.auth.signals import user_login_failed
from django.test import Client, override_settings
from django.urls import reverse

from audit.login import TOO_MANY

PASSWORD = "correct horse battery staple"


@pytest.fixture
def person(django_user_model):
    return django_user_model.objects.create_user(username="victor", password=PASSWORD)


@pytest.fixture
def password_checks():
    """How many times Django checked a password and found it wrong."""
    seen: list[str] = []

    def record(sender, credentials, **kwargs) -> None:
        seen.append(credentials.get("username"))

    user_login_failed.connect(record)
    yield seen
    user_login_failed.disconnect(record)


def log_in(client: Client, username: str, password: str, address: str = "10.0.0.1"):
    return client.post(
        reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address
    )


@override_settings(TANDEM_LOGIN_MAX_FAILURES=3, TANDEM_LOGIN_WINDOW_SECONDS=600)
def test_it_refuses_with_429_after_repeated_failures_without_checking_the_password(
    person, password_checks
):
    client = Client()
    for _ in range(3):
        response = log_in(client, "victor", "wrong")
        assert response.status_code == 200  # the form again, with its error
    assert len(password_checks) == 3
    response = log_in(client, "victor", PASSWORD)  # even the right password
    assert response.status_code == 429
    assert TOO_MANY in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert len(password_checks) == 3  # no fourth check: authenticate() never ran


@override_settings(TANDEM_LOGIN_MAX_FAILURES=3, TANDEM_LOGIN_WINDOW_SECONDS=600)
def test_it_counts_per_username_and_address(person, django_user_model):
    django_user_model.objects.create_user(username="wendy", password=PASSWORD)
    client = Client()
    for _ in range(3):
        log_in(client, "victor", "wrong", address="10.0.0.1")
    assert log_in(client, "VICTOR ", "wrong", address="10.0.0.1").status_code == 429
    # Another address for the same name, and another name from the same address, still work.
    assert log_in(Client(), "victor", PASSWORD, address="10.0.0.2").status_code == 302
    assert log_in(Client(), "wendy", PASSWORD, address="10.0.0.1").status_code == 302


@override_settings(TANDEM_LOGIN_MAX_FAILURES=3, TANDEM_LOGIN_WINDOW_SECONDS=600)
def test_it_clears_the_count_after_a_successful_login(person):
    for _ in range(2):
        log_in(Client(), "victor", "wrong")
    assert log_in(Client(), "victor", PASSWORD).status_code == 302
    for _ in range(2):
        assert log_in(Client(), "victor", "wrong").status_code == 200
    assert log_in(Client(), "victor", PASSWORD).status_code == 302


@override_settings(TANDEM_LOGIN_MAX_FAILURES=2, TANDEM_LOGIN_WINDOW_SECONDS=600)
def test_it_does_not_reset_the_count_on_a_blank_password(person):
    for _ in range(2):
        log_in(Client(), "victor", "wrong")
    log_in(Client(), "victor", "")
    assert log_in(Client(), "victor", PASSWORD).status_code == 429


@override_settings(TANDEM_LOGIN_MAX_FAILURES=2, TANDEM_LOGIN_WINDOW_SECONDS=600)
def test_it_throttles_the_admin_login_too(person, password_checks):
    person.is_staff = True
    person.save()
    client = Client()
    url = reverse("admin:login")
    for _ in range(2):
        client.post(url, {"username": "victor", "password": "wrong"}, REMOTE_ADDR="10.0.0.9")
    response = client.post(
        url, {"username": "victor", "password": PASSWORD}, REMOTE_ADDR="10.0.0.9"
    )
    assert TOO_MANY in response.content.decode()
    assert "_auth_user_id" not in client.session
    assert len(password_checks) == 2


def test_it_keeps_csrf_on_the_login_form(person):
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("login"), {"username": "victor", "password": PASSWORD})
    assert response.status_code == 403
    assert "csrfmiddlewaretoken" in client.get(reverse("login")).content.decode()
