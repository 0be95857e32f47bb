"""`Server-Timing: app;dur=<ms>`: the time Django spent on a request, middleware included."""

from __future__ import annotations

import time


class ServerTiming:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        response["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.3f}"
        return response
