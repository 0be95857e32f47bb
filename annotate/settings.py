"""Django settings for tensorcode annotate.

Everything a deployment changes comes from environment variables (README, "Configuration"); the defaults run
locally with nothing else installed: SQLite and a filesystem message broker under `TC_DATA_DIR`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from annotate import envconfig

BASE_DIR = Path(__file__).resolve().parent.parent

# The "django-insecure-" prefix makes `manage.py check --deploy` flag the default (security.W009).
SECRET_KEY = os.environ.get("SECRET_KEY", "django-insecure-local-development-only")
DEBUG = envconfig.flag("DEBUG", default=True)
ALLOWED_HOSTS = envconfig.csv("ALLOWED_HOSTS", "127.0.0.1,localhost")
# Behind a proxy that ends HTTPS, Django sees plain HTTP while browsers send `Origin: https://...`, so every POST
# would fail the CSRF origin check: list the site's public origins here (https://annotate.example.org).
CSRF_TRUSTED_ORIGINS = envconfig.csv("CSRF_TRUSTED_ORIGINS", "")
# TC_HTTPS: browsers reach the site over HTTPS only, directly or through a proxy that ends HTTPS and sets
# X-Forwarded-Proto (and removes one a client sent). Then cookies are sent over HTTPS only, plain HTTP is
# redirected, and HSTS is sent for TC_HSTS_SECONDS (0, off, unless set: browsers remember it, so it is the
# operator's choice once HTTPS works).
TC_HTTPS = envconfig.flag("TC_HTTPS", default=False)
if TC_HTTPS:
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = int(os.environ.get("TC_HSTS_SECONDS", 0))
CSRF_FAILURE_VIEW = "annotate.views.errors.csrf_failure"

TC_DATA_DIR = Path(os.environ.get("TC_DATA_DIR", BASE_DIR / "var")).resolve()
TC_ARTIFACT_DIR = Path(os.environ.get("TC_ARTIFACT_DIR", TC_DATA_DIR / "artifacts")).resolve()
# Size limits of item imports (JSONL upload, API body, import_items) and of uploaded experience files.
TC_IMPORT_MAX_BYTES = int(os.environ.get("TC_IMPORT_MAX_BYTES", 64 * 1024 * 1024))
# `POST /api/.../items` imports in the request, holding the parsed body: 59 MiB of small items took 56 s and
# 681 MB there (8 MiB: 7 s, 149 MB), so larger bodies go to `POST /api/.../imports`, which a worker imports.
TC_API_ITEMS_MAX_BYTES = int(os.environ.get("TC_API_ITEMS_MAX_BYTES", 8 * 1024 * 1024))
TC_EXPERIENCE_MAX_BYTES = int(os.environ.get("TC_EXPERIENCE_MAX_BYTES", 32 * 1024 * 1024))
TC_MODEL_MAX_BYTES = int(os.environ.get("TC_MODEL_MAX_BYTES", 512 * 1024 * 1024))  # an uploaded model's weights
# CPU threads torch may use in each process: OMP_NUM_THREADS, 1 unless the environment sets it. Workers run a
# process per core (and the database beside them), so torch's default of every core in every process
# oversubscribes the machine: on 2 cores, two workers predicting at once took 30-49 ms a batch with 2 threads each
# against 14 ms with 1 (alone, 2 threads: 12 ms). torch reads these when it is first imported, which every
# process does after loading these settings. Raise OMP_NUM_THREADS on a host that trains alone on its CPU.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", os.environ["OMP_NUM_THREADS"])  # else MKL's own default overrides it

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "annotate",
    "trainingjobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "annotate.middleware.BodyLimit",  # before anything reads a form's body (the CSRF check does)
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "annotate.backends.EarlierSessions",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "annotate.middleware.BrowserTimeZone",
    "annotate.middleware.HtmxSignedOut",
    "annotate.middleware.MethodNotAllowedPage",
]

ROOT_URLCONF = "annotate.urls"
WSGI_APPLICATION = "annotate.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            # `intcomma` in every template: counts at team scale read 98,081, not 98081.
            "builtins": ["django.contrib.humanize.templatetags.humanize"],
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # TIME_ZONE: the zone a page's times are in (the browser's: annotate.middleware.BrowserTimeZone).
                "django.template.context_processors.tz",
            ],
        },
    },
]

DATABASES = {"default": envconfig.database_from_url(os.environ.get("TC_DATABASE", "sqlite"), TC_DATA_DIR)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
if DATABASES["default"]["ENGINE"] == envconfig.POSTGRESQL_ENGINE:
    # Each web worker keeps its PostgreSQL connection between requests (`TC_DB_CONN_MAX_AGE` seconds; 0 closes it
    # after every request): connecting costs as much as a page's queries. Checked before reuse, so a restarted
    # database fails no request.
    DATABASES["default"]["CONN_MAX_AGE"] = int(os.environ.get("TC_DB_CONN_MAX_AGE", 60))
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
    # Values travel apart from the SQL text, so a query repeated with other values is the same statement, and
    # psycopg prepares it on its second use: PostgreSQL then plans it once per connection. Planning the item
    # page's query cost 2.7 ms against 0.4 ms to run it. `TC_DB_PREPARED=0` for a transaction-pooling proxy.
    if os.environ.get("TC_DB_PREPARED", "1") == "1":
        DATABASES["default"].setdefault("OPTIONS", {}).update(server_side_binding=True, prepare_threshold=2)

# A shared cache (Redis: `TC_CACHE_URL=redis://host:6379/0`) lets every request read its session from the cache
# instead of the database (`cached_db`: written through to the database, so sessions survive a cache flush).
# Without one, the cache is per process and sessions stay in the database alone: a per-process session cache
# would let one gunicorn worker keep serving a session another worker has already logged out.
TC_CACHE_URL = os.environ.get("TC_CACHE_URL", "")
if TC_CACHE_URL:
    CACHES = {"default": {"BACKEND": "annotate.cache.RedisCache", "LOCATION": TC_CACHE_URL,
                          "KEY_PREFIX": os.environ.get("TC_CACHE_KEY_PREFIX", "tc")}}
    SESSION_ENGINE = "django.contrib.sessions.backends.cached_db"
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    SESSION_ENGINE = "django.contrib.sessions.backends.db"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Django's ModelBackend, reading the user's own settings (their time zone) with the user in one query.
AUTHENTICATION_BACKENDS = ["annotate.backends.ModelBackend"]
LOGIN_URL = "login"
# Failed sign-ins allowed per name and address before that name is refused there for the rest of the window
# (annotate.accounts). Counted in the cache: per process without TC_CACHE_URL, shared by every web host with it.
TC_SIGNIN_FAILURES = int(os.environ.get("TC_SIGNIN_FAILURES", 10))
TC_SIGNIN_LOCK_MINUTES = float(os.environ.get("TC_SIGNIN_LOCK_MINUTES", 15))
# How long an admin's set-password link works (annotate.accounts): a new teammate may open it days later.
PASSWORD_RESET_TIMEOUT = int(float(os.environ.get("TC_PASSWORD_LINK_DAYS", 7)) * 86400)
# Email is optional (annotate.accounts): with `TC_EMAIL_URL` the site mails set-password links itself and a
# forgotten password can be reset from the sign-in page; without it, an admin passes the links on.
globals().update(envconfig.email_from_url(os.environ.get("TC_EMAIL_URL", "").strip()))
DEFAULT_FROM_EMAIL = os.environ.get("TC_EMAIL_FROM", "tensorcode annotate <annotate@localhost>")
# A forgotten-password request mails an account at most once in this many minutes (counted in the cache).
TC_RESET_EMAIL_MINUTES = float(os.environ.get("TC_RESET_EMAIL_MINUTES", 5))
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = TC_DATA_DIR / "static"

# Celery: JSON only, so a task's arguments are primary keys and plain data, never pickled objects.
CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "filesystem://")
CELERY_RESULT_BACKEND = os.environ.get("CELERY_RESULT_BACKEND") or None
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Training goes to the `gpu` queue (workers started with `-Q gpu --concurrency 1`, one job per GPU); imports,
# exports and predictions to the default queue. A message is acknowledged only when its task ends, and given
# back if the worker dies; one message at a time per worker, so a long job does not hold others hostage.
CELERY_TASK_DEFAULT_QUEUE = "celery"
CELERY_TASK_ROUTES = {"trainingjobs.tasks.train_job": {"queue": "gpu"}}
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis redelivers a message still unacknowledged after this long; a job's lease makes that redelivery harmless.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": int(os.environ.get("TC_BROKER_VISIBILITY_TIMEOUT", 3600))}
if os.environ.get("TC_BROKER_KEYPREFIX"):
    # Deployments (or concurrent test runs) sharing one Redis database keep their queues apart by key prefix.
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = os.environ["TC_BROKER_KEYPREFIX"]
# `celery beat` re-queues jobs whose worker stopped sending heartbeats or whose message was lost
# (trainingjobs.tasks.sweep_jobs) and sends again the task of an upload or export whose message was lost or whose
# worker died, and predictions lost while the workers are idle (annotate.tasks.resend_stale_work).
CELERY_BEAT_SCHEDULE = {
    "trainingjobs-sweep": {"task": "trainingjobs.tasks.sweep_jobs", "schedule": float(os.environ.get(
        "TC_JOB_SWEEP_SECONDS", 30))},
    "annotate-resend-stale-work": {"task": "annotate.tasks.resend_stale_work", "schedule": float(
        os.environ.get("TC_RESEND_SWEEP_SECONDS", 60))},
}
# A worker's lease on a job lasts this long past its last heartbeat (sent every third of it, or more often).
TC_JOB_LEASE_SECONDS = float(os.environ.get("TC_JOB_LEASE_SECONDS", 60))
# An experience export captures its minibatches in this many processes: the exporting one and the rest forked
# from it (1: in that process alone). Capturing runs the model, CPU-bound, so a forked worker pays where a core
# is free for it; the default leaves one core to the database the export reads and to the site. On 2 cores a
# second process was only 1.1-1.5x faster and took the export from 280 MB to 300 MB (README "Benchmarks").
TC_EXPORT_PROCESSES = int(os.environ.get("TC_EXPORT_PROCESSES", min(max((os.cpu_count() or 1) - 1, 1), 4)))

_local_dirs = [TC_DATA_DIR, TC_ARTIFACT_DIR]
if CELERY_BROKER_URL.startswith("filesystem:"):
    # The filesystem broker is how the web process and a worker share a queue with no service installed.
    # Reading and writing the same folder makes it one queue; kombu creates neither folder itself.
    _queue_dir = TC_DATA_DIR / "broker" / "queue"
    _local_dirs += [_queue_dir, TC_DATA_DIR / "broker" / "control"]
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_queue_dir),
        "data_folder_out": str(_queue_dir),
        "control_folder": str(TC_DATA_DIR / "broker" / "control"),
    }

for _path in _local_dirs:
    # A directory that cannot be made is reported by the system checks (annotate.checks), not by a crash here.
    with contextlib.suppress(OSError):
        _path.mkdir(parents=True, exist_ok=True)
