"""Login is throttled per username and client address, on the login page and the admin's."""

from __future__ import annotations

from ipaddress import ip_network

import pytest
from django.contrib.auth.signals import user_login_failed
from django.test import Client, RequestFactory, override_settings
from django.urls import reverse

from audit.login import TOO_MANY, client_address

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


@override_settings(TANDEM_LOGIN_MAX_FAILURES=3, TANDEM_LOGIN_WINDOW_SECONDS=600)
def test_it_counts_look_alike_usernames_as_one(person, password_checks):
    # Full-width letters, another case: all "victor" to the throttle.
    for look_alike in ("\uff56\uff49\uff43\uff54\uff4f\uff52", "Victor", "VICTOR"):
        assert log_in(Client(), look_alike, "wrong").status_code == 200
    assert log_in(Client(), "victor", PASSWORD).status_code == 429
    assert log_in(Client(), "\uff36ictor", "wrong").status_code == 429
    assert len(password_checks) == 3


@pytest.mark.parametrize(
    ("remote", "forwarded", "client"),
    [
        ("203.0.113.7", "", "203.0.113.7"),  # no proxy in front
        ("203.0.113.7", "198.51.100.1", "203.0.113.7"),  # not a trusted proxy: header ignored
        ("10.9.0.2", "203.0.113.7", "203.0.113.7"),  # behind the proxy
        ("10.9.0.2", "198.51.100.1, 203.0.113.7", "203.0.113.7"),  # the left one is forged
        ("10.9.0.2", "198.51.100.1, 203.0.113.7, 10.9.3.4", "203.0.113.7"),  # two proxies
        ("::ffff:10.9.0.2", "203.0.113.7", "203.0.113.7"),  # IPv4 on a dual-stack socket
        ("10.9.0.2", "10.9.0.8, 10.9.3.4", "10.9.0.8"),  # every hop ours: began inside
        ("10.9.0.2", "", "10.9.0.2"),  # the proxy itself, no header
    ],
)
def test_it_reads_the_client_address_behind_a_trusted_proxy_only(remote, forwarded, client):
    headers = {"HTTP_X_FORWARDED_FOR": forwarded} if forwarded else {}
    request = RequestFactory().post("/", REMOTE_ADDR=remote, **headers)
    with override_settings(TANDEM_TRUSTED_PROXIES=(ip_network("10.9.0.0/16"),)):
        assert client_address(request) == client
    with override_settings(TANDEM_TRUSTED_PROXIES=()):
        assert client_address(request) == remote  # no proxy configured: never the header


@override_settings(
    TANDEM_LOGIN_MAX_FAILURES=3,
    TANDEM_LOGIN_WINDOW_SECONDS=600,
    TANDEM_TRUSTED_PROXIES=(ip_network("10.9.0.2"),),
)
def test_it_throttles_the_client_behind_the_proxy_not_the_proxy(person):
    def through_proxy(forwarded: str, password: str) -> int:
        return (
            Client(HTTP_X_FORWARDED_FOR=forwarded)
            .post(
                reverse("login"),
                {"username": "victor", "password": password},
                REMOTE_ADDR="10.9.0.2",
            )
            .status_code
        )

    for forged in ("1.1.1.1", "2.2.2.2", "3.3.3.3"):  # a fresh forged address each time
        assert through_proxy(f"{forged}, 203.0.113.7", "wrong") == 200
    assert through_proxy("4.4.4.4, 203.0.113.7", PASSWORD) == 429
    # Another person behind the same proxy still logs in.
    assert through_proxy("203.0.113.8", PASSWORD) == 302
    # Without the proxy setting a forged header changes nothing: the address is REMOTE_ADDR.
    with override_settings(TANDEM_TRUSTED_PROXIES=()):
        for forged in ("5.5.5.5", "6.6.6.6", "7.7.7.7"):
            log_in(Client(HTTP_X_FORWARDED_FOR=forged), "victor", "wrong", address="10.0.0.7")
        assert (
            log_in(
                Client(HTTP_X_FORWARDED_FOR="8.8.8.8"), "victor", PASSWORD, address="10.0.0.7"
            ).status_code
            == 429
        )
