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


def database_from_url(value: str, data_dir: Path) -> dict:
    """Return a Django `DATABASES["default"]` entry for `TC_DATABASE`.

    `sqlite` means a file `annotate.sqlite3` in `data_dir`; `postgres://user:password@host:port/name?opt=v`
    (or `postgresql://`) means PostgreSQL, with query parameters passed as connection options.
    """
    if value == "sqlite":
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": data_dir / "annotate.sqlite3"}
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
