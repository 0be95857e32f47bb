"""`manage.py demo`: the whole site on one machine, for trying it out."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

DEMO_USERNAME = "admin"
DEMO_PASSWORD = "admin"


def worker_command() -> list[str]:
    """The Celery worker the demo runs beside the web server: one task at a time, in its own process."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "annotate",
        "worker",
        "--pool=solo",
        "--concurrency=1",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
    ]


class Command(BaseCommand):
    help = (
        "Migrate the database, create a demo admin user, then run a Celery worker and the development server "
        "until interrupted. For local use only: refuses to run with DEBUG off."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "addrport",
            nargs="?",
            default="127.0.0.1:8000",
            help="Address and port for the web server (default 127.0.0.1:8000).",
        )

    def handle(self, *args, addrport: str, **options) -> None:
        if not settings.DEBUG:
            raise CommandError("demo creates a user with a known password; it runs only with DEBUG on.")
        host, port = _split_addrport(addrport)
        _ensure_port_free(host, port)
        call_command("migrate", interactive=False, verbosity=0)
        self._ensure_demo_user()
        self.stdout.write(f"Sign in at http://{host}:{port}/ as {DEMO_USERNAME} / {DEMO_PASSWORD}")

        worker = subprocess.Popen(worker_command(), cwd=settings.BASE_DIR)
        self.stdout.write(f"Celery worker started (pid {worker.pid})")
        self.stdout.flush()
        # runserver stops on Ctrl-C (KeyboardInterrupt); let SIGTERM do so too, so `finally` stops the worker.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        try:
            # The autoreloader would re-run this command in a child process and so start a second worker.
            call_command("runserver", f"{host}:{port}", use_reloader=False)
        finally:
            _stop(worker)
            self.stdout.write("Celery worker stopped")

    def _ensure_demo_user(self) -> None:
        user, _ = get_user_model().objects.get_or_create(username=DEMO_USERNAME)
        user.is_staff = user.is_superuser = True
        user.set_password(DEMO_PASSWORD)
        user.save()


def _split_addrport(addrport: str) -> tuple[str, int]:
    host, _, port = addrport.rpartition(":")
    if not port.isdigit():
        raise CommandError(f"{addrport!r} is not a port or address:port, such as 127.0.0.1:8000.")
    return host or "127.0.0.1", int(port)


def _ensure_port_free(host: str, port: int) -> None:
    # runserver ends the process with os._exit when it cannot bind, which would skip stopping the worker:
    # find out before the worker starts.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise CommandError(f"Cannot serve on {host}:{port}: {exc.strerror}.") from exc


def _stop(worker: subprocess.Popen) -> None:
    worker.terminate()
    try:
        worker.wait(timeout=15)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
