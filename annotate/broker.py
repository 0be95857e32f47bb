"""What the broker can tell the sweeps: how many messages wait in a task's queue."""

from __future__ import annotations

import logging

from celery import Task

logger = logging.getLogger(__name__)


def waiting_messages(task: Task) -> int | None:
    """How many messages wait in the broker queue `task` is sent to (not those a worker holds); None if the
    broker cannot say.

    The queue is declared as sending a task declares it, so one the broker has not seen yet counts 0. (A
    passive declaration cannot see a Redis queue under `global_keyprefix`: kombu checks the unprefixed key.)
    """
    queue = task.app.amqp.router.route({}, task.name)["queue"].name
    try:
        with task.app.connection_for_read() as connection:
            return connection.default_channel.queue_declare(queue=queue).message_count
    except Exception:  # a broker that is down or cannot count: the sweep must go on without the number
        logger.exception("could not count the messages waiting in queue %r", queue)
        return None
