"""Read the site's configuration from environment variables (see README, "Configuration")."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})
# Django's PostgreSQL backend with the protocol's parameter limit declared (annotate/db/base.py).
POSTGRESQL_ENGINE = "annotate.db"


# The embedded default serves the site and its worker at once. A transaction that reads and then writes while
# the other process writes fails at once with "database is locked" (SQLite cannot wait there without deadlock),
# so each transaction takes the write lock when it begins and waits for it up to `timeout` seconds; in WAL mode
# reads go on beside a write.
SQLITE_OPTIONS = {"transaction_mode": "IMMEDIATE", "timeout": 20, "init_command": "PRAGMA journal_mode=WAL"}


def database_from_url(value: str, data_dir: Path) -> dict:
    """Return a Django `DATABASES["default"]` entry for `TC_DATABASE`.

    `sqlite` means a file `annotate.sqlite3` in `data_dir`; `postgres://user:password@host:port/name?opt=v`
    (or `postgresql://`) means PostgreSQL, with query parameters passed as connection options.
    """
    if value == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": data_dir / "annotate.sqlite3",
                "OPTIONS": dict(SQLITE_OPTIONS)}
    url = urlsplit(value)
    if url.scheme not in ("postgres", "postgresql"):
        raise ImproperlyConfigured(
            f"TC_DATABASE={value!r} is not understood; use 'sqlite' or a URL like "
            "'postgres://postgres@127.0.0.1:5432/annotate'."
        )
    name = unquote(url.path.lstrip("/"))
    if not name:
        raise ImproperlyConfigured(
            f"TC_DATABASE={value!r} names no database; add it as the path, as in '.../annotate'."
        )
    return {
        "ENGINE": POSTGRESQL_ENGINE,
        "NAME": name,
        "USER": unquote(url.username or ""),
        "PASSWORD": unquote(url.password or ""),
        "HOST": url.hostname or "",
        "PORT": str(url.port or ""),
        "OPTIONS": dict(parse_qsl(url.query)),
    }


def flag(name: str, default: bool) -> bool:
    """Read a yes/no variable: 1/true/yes/on or 0/false/no/off (any case)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a yes/no value; use 1/true/yes/on or 0/false/no/off.")


def csv(name: str, default: str) -> list[str]:
    """Read a comma-separated list, dropping blanks."""
    return [part.strip() for part in os.environ.get(name, default).split(",") if part.strip()]


def email_from_url(value: str) -> dict:
    """Return Django's email settings for `TC_EMAIL_URL`, with `TC_EMAIL` saying whether the site sends any.

    Empty: no email; set-password links are shown to the admin who asks, to pass on. `console` writes each
    message to the server's log (to try it out). `smtp://user:password@host:port` sends through that server with
    STARTTLS (port 587 unless given; `?tls=0` for a relay on a private network that takes plain SMTP), and
    `smtps://...` over TLS from the first byte (port 465 unless given).
    """
    if not value:
        return {"TC_EMAIL": False}
    if value in ("console", "console:", "console://"):
        return {"TC_EMAIL": True, "EMAIL_BACKEND": "django.core.mail.backends.console.EmailBackend"}
    url = urlsplit(value)
    hint = "use 'smtp://user:password@mail.example.com:587', 'smtps://...' or 'console'"
    if url.scheme not in ("smtp", "smtps"):
        raise ImproperlyConfigured(f"TC_EMAIL_URL={_hide_password(value)!r} is not understood; {hint}.")
    if not url.hostname:
        raise ImproperlyConfigured(f"TC_EMAIL_URL={_hide_password(value)!r} names no mail server; {hint}.")
    options = dict(parse_qsl(url.query))
    unknown = sorted(set(options) - {"tls"})
    if unknown:
        raise ImproperlyConfigured(f"TC_EMAIL_URL: unknown option {', '.join(unknown)}; the one option is tls=0.")
    starttls = options.get("tls", "1").strip().lower()
    if starttls not in _TRUE | _FALSE:
        raise ImproperlyConfigured(f"TC_EMAIL_URL: tls={options['tls']!r} is not a yes/no value.")
    ssl = url.scheme == "smtps"
    return {
        "TC_EMAIL": True,
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": url.hostname,
        "EMAIL_PORT": url.port or (465 if ssl else 587),
        "EMAIL_HOST_USER": unquote(url.username or ""),
        "EMAIL_HOST_PASSWORD": unquote(url.password or ""),
        "EMAIL_USE_SSL": ssl,
        "EMAIL_USE_TLS": not ssl and starttls in _TRUE,
        # A request waits for the send: a mail server that does not answer must not hold it for long.
        "EMAIL_TIMEOUT": 10,
    }


def _hide_password(value: str) -> str:
    url = urlsplit(value)
    if url.password is None:
        return value
    return value.replace(f":{url.password}@", ":***@", 1)
