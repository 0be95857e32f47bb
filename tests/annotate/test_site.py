"""The site's frame: sign-in, the home page, static files, settings and system checks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.urls import reverse

from annotate import envconfig


def test_home_redirects_anonymous_user_to_login(client) -> None:
    response = client.get(reverse("home"))

    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next=/"


@pytest.mark.django_db
def test_home_shows_product_to_signed_in_user(client, django_user_model) -> None:
    client.force_login(django_user_model.objects.create_user("reviewer"))

    response = client.get(reverse("home"))

    assert response.status_code == 200
    page = response.content.decode()
    assert "tensorcode annotate" in page
    assert "No projects yet." in page
    assert 'src="/static/htmx.min.js"' in page
    assert f'hx-headers=\'{{"X-CSRFToken": "{response.context["csrf_token"]}"}}\'' in page


def test_home_rejects_post(client) -> None:
    assert client.post(reverse("home")).status_code == 405


@pytest.mark.django_db
def test_login_page_signs_user_in(client, django_user_model) -> None:
    django_user_model.objects.create_user("reviewer", password="a-long-password")

    response = client.post(reverse("login"), {"username": "reviewer", "password": "a-long-password"})

    assert response.status_code == 302
    assert response["Location"] == reverse("home")


def test_collectstatic_includes_vendored_htmx(settings, tmp_path: Path) -> None:
    settings.STATIC_ROOT = tmp_path / "static"

    call_command("collectstatic", interactive=False, verbosity=0)

    assert (tmp_path / "static" / "htmx.min.js").read_text().startswith("var htmx=")


def test_database_from_url_parses_postgres(tmp_path: Path) -> None:
    url = "postgres://ann:p%40ss@db.local:5433/annotate?sslmode=require"

    config = envconfig.database_from_url(url, tmp_path)

    assert config == {
        "ENGINE": "annotate.db",
        "NAME": "annotate",
        "USER": "ann",
        "PASSWORD": "p@ss",
        "HOST": "db.local",
        "PORT": "5433",
        "OPTIONS": {"sslmode": "require"},
    }


def test_database_from_url_puts_sqlite_in_data_dir(tmp_path: Path) -> None:
    config = envconfig.database_from_url("sqlite", tmp_path)

    assert config == {"ENGINE": "django.db.backends.sqlite3", "NAME": tmp_path / "annotate.sqlite3",
                      "OPTIONS": {"transaction_mode": "IMMEDIATE", "timeout": 20,
                                  "init_command": "PRAGMA journal_mode=WAL"}}


# Four connections at once, each reading a row and writing it back in one transaction, as the site's views and
# its worker do to the embedded database. Without a write lock taken at BEGIN, SQLite refuses such a write at once
# ("database is locked") whenever another connection is writing: 1 or 2 of the 4 failed in each of 4 runs.
CONCURRENT_WRITERS = """
import threading
import django
django.setup()
from django.db import connection, transaction

with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)")
    cursor.execute("INSERT INTO counter VALUES (1, 0)")
errors = []

def add():
    try:
        for _ in range(100):
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT n FROM counter WHERE id = 1")
                cursor.execute("UPDATE counter SET n = %s WHERE id = 1", [cursor.fetchone()[0] + 1])
    except Exception as exc:
        errors.append(repr(exc))
    finally:
        connection.close()

threads = [threading.Thread(target=add) for _ in range(4)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
with connection.cursor() as cursor:
    cursor.execute("SELECT n FROM counter")
    print(errors, cursor.fetchone()[0])
"""


def test_the_embedded_database_serves_concurrent_read_then_write_transactions(tmp_path: Path) -> None:
    env = {**os.environ, "TC_DATABASE": "sqlite", "TC_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE":
           "annotate.settings"}
    done = subprocess.run([sys.executable, "-c", CONCURRENT_WRITERS], env=env, capture_output=True, text=True,
                          timeout=120, cwd=settings.BASE_DIR)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "400"]  # no error, and no update lost


@pytest.mark.parametrize("value", ["mysql://root@localhost/annotate", "postgres://postgres@127.0.0.1:5432/"])
def test_database_from_url_rejects_unusable_values(value: str, tmp_path: Path) -> None:
    with pytest.raises(ImproperlyConfigured, match="TC_DATABASE"):
        envconfig.database_from_url(value, tmp_path)


def test_email_from_url_reads_smtp_smtps_and_console() -> None:
    assert envconfig.email_from_url("") == {"TC_EMAIL": False}
    smtp = envconfig.email_from_url("smtp://ann:p%40ss@mail.example.com")
    assert smtp == {
        "TC_EMAIL": True, "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "mail.example.com", "EMAIL_PORT": 587, "EMAIL_HOST_USER": "ann", "EMAIL_HOST_PASSWORD": "p@ss",
        "EMAIL_USE_SSL": False, "EMAIL_USE_TLS": True, "EMAIL_TIMEOUT": 10,
    }
    smtps = envconfig.email_from_url("smtps://mail.example.com")
    assert (smtps["EMAIL_PORT"], smtps["EMAIL_USE_SSL"], smtps["EMAIL_USE_TLS"]) == (465, True, False)
    relay = envconfig.email_from_url("smtp://relay.internal:25?tls=0")
    assert (relay["EMAIL_PORT"], relay["EMAIL_USE_TLS"], relay["EMAIL_HOST_USER"]) == (25, False, "")
    assert envconfig.email_from_url("console")["EMAIL_BACKEND"] == "django.core.mail.backends.console.EmailBackend"


@pytest.mark.parametrize(("value", "says"), [
    ("http://ann:secret@mail.example.com", "not understood"),
    ("smtp://ann:secret@:587", "names no mail server"),
    ("smtp://mail.example.com?ssl=1", "unknown option ssl"),
    ("smtp://mail.example.com?tls=maybe", "not a yes/no value"),
])
def test_email_from_url_rejects_unusable_values_without_showing_the_password(value: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=says) as error:
        envconfig.email_from_url(value)
    assert "secret" not in str(error.value)


def test_flag_rejects_unknown_value(monkeypatch) -> None:
    monkeypatch.setenv("DEBUG", "maybe")

    with pytest.raises(ImproperlyConfigured, match="DEBUG='maybe'"):
        envconfig.flag("DEBUG", default=True)


def test_system_checks_pass() -> None:
    assert checks.run_checks() == []


def test_artifact_dir_check_reports_unwritable_path(settings, tmp_path: Path) -> None:
    not_a_dir = tmp_path / "artifacts-file"
    not_a_dir.write_text("")
    settings.TC_ARTIFACT_DIR = not_a_dir

    assert [error.id for error in checks.run_checks()] == ["annotate.E001"]


def test_celery_uses_json_only() -> None:
    from annotate import celery_app

    assert celery_app.conf.task_serializer == "json"
    assert celery_app.conf.result_serializer == "json"
    assert celery_app.conf.accept_content == ["json"]
    assert settings.CELERY_ACCEPT_CONTENT == ["json"]


def test_csrf_trusted_origins_come_from_the_environment() -> None:
    """Behind an HTTPS proxy the site's public origin must be trusted, or every form POST is refused."""
    env = {**os.environ, "CSRF_TRUSTED_ORIGINS": "https://annotate.example.org, https://other.example.org"}
    code = "import django; django.setup(); from django.conf import settings; print(settings.CSRF_TRUSTED_ORIGINS)"
    done = subprocess.run([sys.executable, "-c", code], env={**env, "DJANGO_SETTINGS_MODULE": "annotate.settings"},
                          capture_output=True, text=True, check=True, cwd=settings.BASE_DIR)
    assert done.stdout.strip() == "['https://annotate.example.org', 'https://other.example.org']"


def test_sessions_use_the_shared_cache_only_when_one_is_configured() -> None:
    """`TC_CACHE_URL` (Redis) turns on cached sessions; without it sessions stay in the database alone, since a
    per-process cache would let one worker keep a session that another has logged out."""
    code = ("import django; django.setup(); from django.conf import settings; "
            "print(settings.SESSION_ENGINE, settings.CACHES['default']['BACKEND'])")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "annotate.settings"}
    shared = subprocess.run([sys.executable, "-c", code], env={**env, "TC_CACHE_URL": "redis://127.0.0.1:6379/9"},
                            capture_output=True, text=True, check=True, cwd=settings.BASE_DIR)
    local = subprocess.run([sys.executable, "-c", code], env={**env, "TC_CACHE_URL": ""},
                           capture_output=True, text=True, check=True, cwd=settings.BASE_DIR)

    assert shared.stdout.split() == ["django.contrib.sessions.backends.cached_db", "annotate.cache.RedisCache"]
    assert local.stdout.split() == ["django.contrib.sessions.backends.db",
                                    "django.core.cache.backends.locmem.LocMemCache"]


@pytest.mark.redis
@pytest.mark.django_db
def test_logout_ends_a_cached_session_everywhere(settings, client, django_user_model) -> None:
    """With sessions cached in Redis, signing out ends the session for every worker: the old cookie is refused."""
    from django.core.cache import cache
    from django.test import Client

    from tests.conftest import REDIS_URL

    settings.CACHES = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": REDIS_URL,
                                   "KEY_PREFIX": f"tc-test-{os.getpid()}"}}
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
    django_user_model.objects.create_user("cara", password="a-long-password")
    assert client.post(reverse("login"), {"username": "cara", "password": "a-long-password"}).status_code == 302
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    other_worker = Client()
    other_worker.cookies[settings.SESSION_COOKIE_NAME] = cookie
    assert other_worker.get(reverse("home")).status_code == 200
    assert cache.get(f"django.contrib.sessions.cached_db{cookie}") is not None

    client.post(reverse("logout"))

    assert cache.get(f"django.contrib.sessions.cached_db{cookie}") is None
    assert other_worker.get(reverse("home")).status_code == 302


@pytest.mark.redis
def test_the_redis_cache_keeps_one_client_for_every_call(settings) -> None:
    """Django's client builds a `redis.Redis` per call; ours builds one, and it still reads what it writes."""
    from django.core.cache import caches

    from tests.conftest import REDIS_URL

    settings.CACHES = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": REDIS_URL,
                                   "KEY_PREFIX": f"tc-test-client-{os.getpid()}"}}
    cache = caches.create_connection("default")
    built = []
    real = cache._cache._client
    cache._cache._client = lambda **kwargs: built.append(kwargs) or real(**kwargs)

    cache.set("answer", {"target": [0.25, 0.75]}, 30)
    assert cache.get("answer") == {"target": [0.25, 0.75]}
    assert cache.get("missing", "default") == "default"
    cache.delete("answer")

    assert cache.get("answer") is None
    assert len(built) == 1
    assert cache._cache.get_client(write=True) is cache._cache.get_client()


def _postgres_database_settings(printed: str, **environment: str) -> list[str]:
    """What `print(<printed>)` shows of `d = settings.DATABASES['default']` in a fresh process on PostgreSQL."""
    code = f"import django; django.setup(); from django.conf import settings; d = settings.DATABASES['default']; " \
           f"print({printed})"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "annotate.settings",
           "TC_DATABASE": "postgres://postgres@127.0.0.1:5432/annotate", **environment}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                          cwd=settings.BASE_DIR)
    return done.stdout.split()


def test_postgres_connections_are_kept_between_requests() -> None:
    """Connecting to PostgreSQL costs as much as a page's queries: web workers keep their connection (checked)."""
    printed = "d['CONN_MAX_AGE'], d['CONN_HEALTH_CHECKS']"
    assert _postgres_database_settings(printed) == ["60", "True"]
    assert _postgres_database_settings(printed, TC_DB_CONN_MAX_AGE="0") == ["0", "True"]


def test_postgres_queries_are_prepared_unless_turned_off() -> None:
    printed = "d['OPTIONS'].get('server_side_binding'), d['OPTIONS'].get('prepare_threshold')"
    assert _postgres_database_settings(printed) == ["True", "2"]
    assert _postgres_database_settings(printed, TC_DB_PREPARED="0") == ["None", "None"]


@pytest.mark.postgres
@pytest.mark.django_db
def test_a_repeated_query_is_planned_once_per_connection() -> None:
    """The item page's query cost more to plan than to run: repeated with other values, it is a prepared statement."""
    from django.db import connection

    from annotate.models import Item

    for pk in (1, 2, 3):
        Item.objects.filter(pk=pk).first()
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        statements = [row[0] for row in cursor.fetchall()]

    assert any('FROM "annotate_item"' in statement for statement in statements), statements


def test_pages_name_the_site_icon_and_the_browsers_default_address_leads_to_it(client) -> None:
    page = client.get(reverse("login")).content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page
    response = client.get("/favicon.ico")
    assert response.status_code == 301 and response["Location"] == "/static/favicon.svg"
    assert (settings.BASE_DIR / "static" / "favicon.svg").read_text().startswith("<svg")


def test_tc_https_makes_cookies_secure_redirects_plain_http_and_passes_the_deploy_check() -> None:
    """`manage.py check --deploy` names what a site served over HTTPS must set; `TC_HTTPS=1` sets it all, and
    HSTS only with `TC_HSTS_SECONDS` (browsers remember it)."""
    env = {key: value for key, value in os.environ.items() if key != "DJANGO_ALLOW_ASYNC_UNSAFE"}  # browser tests'
    env.update(DJANGO_SETTINGS_MODULE="annotate.settings", DEBUG="0", TC_CACHE_URL="",
               SECRET_KEY="a-deployment-key-long-and-random-enough-" + "x" * 30)

    def deploy_check(**extra) -> str:
        done = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], env={**env, **extra},
                              capture_output=True, text=True, cwd=settings.BASE_DIR)
        return done.stdout + done.stderr

    plain = deploy_check()
    for warning in ("security.W004", "security.W008", "security.W012", "security.W016"):
        assert warning in plain
    https = deploy_check(TC_HTTPS="1")
    assert "security.W004" in https and "W008" not in https and "W012" not in https and "W016" not in https
    hsts = deploy_check(TC_HTTPS="1", TC_HSTS_SECONDS="31536000")
    # Left: the hints to extend HSTS to subdomains and the preload list, which only the operator can weigh.
    assert "security.W004" not in hsts and "ERRORS" not in hsts and "W005" in hsts
    # A cache per process counts failed sign-ins per process: the README's production settings share one.
    assert "annotate.W001" in plain and "annotate.W001" in hsts
    shared = deploy_check(TC_HTTPS="1", TC_HSTS_SECONDS="31536000", TC_CACHE_URL="redis://127.0.0.1:6379/9")
    assert "annotate.W001" not in shared and "ERRORS" not in shared
    assert "annotate.W001" not in subprocess.run([sys.executable, "manage.py", "check"], env=env, text=True,
                                                 capture_output=True, cwd=settings.BASE_DIR).stdout  # local runs

    code = ("import django; django.setup(); from django.conf import settings as s; "
            "print(s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE)")
    done = subprocess.run([sys.executable, "-c", code], env={**env, "TC_HTTPS": "yes"}, capture_output=True,
                          text=True, check=True, cwd=settings.BASE_DIR)
    assert done.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https') True True True"
