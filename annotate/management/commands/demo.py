"""`manage.py demo`: the whole site on one machine, for trying it out."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from annotate import demo


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
        # The default queue (predictions, imports, exports) and the gpu queue (training jobs).
        "-Q",
        "celery,gpu",
        "--concurrency=1",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
    ]


class Command(BaseCommand):
    help = (
        "Migrate the database, create a demo admin and reviewer and one demo project per tool kind and mode "
        "(each with a briefly trained model and items to review), and an overlap-2 project that two more demo "
        "reviewers have partly answered (for the agreement pages), then run a Celery worker and the development "
        "server until interrupted. Safe to run again. For local use only: refuses to run with DEBUG off."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "addrport",
            nargs="?",
            default="127.0.0.1:8000",
            help="Address and port for the web server (default 127.0.0.1:8000).",
        )
        parser.add_argument(
            "--no-serve", action="store_true", help="Only migrate and create the demo data, then exit."
        )
        parser.add_argument(
            "--recreate", action="store_true",
            help="Also create again the demo projects deleted since the demo created them (otherwise they stay "
                 "deleted).",
        )

    def handle(self, *args, addrport: str, no_serve: bool = False, recreate: bool = False, **options) -> None:
        if not settings.DEBUG:
            raise CommandError("demo creates users with known passwords; it runs only with DEBUG on.")
        host, port = _split_addrport(addrport)
        if not no_serve:
            _ensure_port_free(host, port)
        call_command("migrate", interactive=False, verbosity=0)
        demo.seed(log=self._say, recreate=recreate)
        if no_serve:
            return
        self._say(
            f"Sign in at http://{host}:{port}/ as {demo.ADMIN[0]} / {demo.ADMIN[1]} (project admin and staff) "
            f"or {demo.REVIEWER[0]} / {demo.REVIEWER[1]} (reviewer)."
        )

        # --beat adds the scheduler that re-queues jobs whose worker died: one process is the demo's back end.
        # Its own process group, so stopping it also stops what it started (its beat process, an export's capture
        # processes) even when it has to be killed in the middle of a task.
        worker = subprocess.Popen([*worker_command(), "--beat"], cwd=settings.BASE_DIR, start_new_session=True)
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

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()


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


def _stop(worker: subprocess.Popen, grace: float = 15) -> None:
    """Ask the worker's process group to stop (a task under way may finish), then kill what is left after `grace`
    seconds. A training job killed this way resumes from its checkpoint on the next start."""
    _signal_group(worker, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.wait(timeout=grace)
    _signal_group(worker, signal.SIGKILL)  # also whatever the worker started and left behind
    worker.wait()


def _signal_group(worker: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(worker.pid, signum)
