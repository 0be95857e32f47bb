"""Celery tasks of the reviewer app."""

from __future__ import annotations

from celery import shared_task


@shared_task
def ping() -> str:
    """Answer "pong": proves a worker is consuming from the configured broker."""
    return "pong"
