"""Middleware of the site's own."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.shortcuts import resolve_url

from annotate.views import errors


class HtmxSignedOut:
    """An htmx request from a signed-out user gets 401 and the reason, not the sign-in page.

    `login_required` answers with a redirect to the sign-in page; the browser follows it inside the htmx request,
    and htmx would swap the whole sign-in page into the workspace, over the answer the reviewer was giving. A 401
    swaps nothing: the page says why (`static/keyboard.js`) and offers to sign in in another tab, after which the
    same action, repeated, goes through. Last in `MIDDLEWARE`, so `request.htmx` is set.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.login_path = None

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 302 and getattr(request, "htmx", False):
            if self.login_path is None:
                self.login_path = resolve_url(settings.LOGIN_URL)
            if urlsplit(response.get("Location", "")).path == self.login_path:
                return errors.signed_out(request)
        return response


class MethodNotAllowedPage:
    """Django's 405 (`require_POST`, `require_GET`) has an empty body: the browser shows a blank page. Give it the
    site's error page, with the reason, and keep the `Allow` header."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code == 405 and not response.content:
            return errors.method_not_allowed(request, response.get("Allow", ""))
        return response
