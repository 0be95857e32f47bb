"""The site's error pages (400, 401 for htmx, 403, 404, 405, a failed CSRF check, and `templates/500.html`): the
reason in the site's own layout, or JSON under `api/`.

Django's default pages are bare and never say why. Our views raise `Http404` and `PermissionDenied` with a
sentence for the reader ("No such item.", "This item is gone: its project was deleted while you were
answering."); that sentence is shown, and a failed htmx request shows it in the page's message area
(`static/keyboard.js` reads `data-error-reason`). Django's own exceptions without one (an unknown address, a
malformed request) get a general sentence instead of a class name.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render, resolve_url
from django.urls import Resolver404

TITLES = {400: "Bad request", 401: "Signed out", 403: "Not allowed", 404: "Not found", 405: "Not a page",
          413: "Too large"}
STALE_FORM = ("This form has expired (you signed in again since the page was loaded, or it came from another "
              "site), so nothing was changed. Reload the page and submit it again.")
SIGNED_OUT = ("You are signed out: your session ended, or you signed out elsewhere. Sign in again in another tab, "
              "then repeat what you did here: nothing on this page was lost.")
GENERAL = {
    400: "The request could not be understood. Nothing was changed.",
    403: "You are not allowed to do that here. Nothing was changed.",
    404: "There is nothing at this address, or it is not yours to see.",
}


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _page(request, 400, None)  # its exception can carry internals (a SuspiciousOperation's details)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _page(request, 403, exception)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    return _page(request, 404, None if isinstance(exception, Resolver404) else exception)


def method_not_allowed(request: HttpRequest, allowed: str) -> HttpResponse:
    """405 for a method a view refuses (`require_POST` and friends answer with an empty body): most often an
    action's address opened as a page, from the history or a copied link."""
    methods = " or ".join(m.strip() for m in allowed.split(",") if m.strip()) or "another method"
    text = (f"This address is an action, not a page: it takes {methods} from a form, so opening it did nothing."
            if request.method == "GET" else f"This address takes only {methods}. Nothing was changed.")
    response = _render(request, 405, text)
    response["Allow"] = allowed
    return response


def too_large(request: HttpRequest, text: str) -> HttpResponse:
    """413 for a body over what its address takes (`annotate.middleware.BodyLimit`), read no further."""
    return _render(request, 413, text)


def signed_out(request: HttpRequest) -> HttpResponse:
    """401 for an htmx request that needs a signed-in user (`annotate.middleware.HtmxSignedOut`), with a link to
    sign in that comes back to the page the request came from."""
    back = request.htmx.current_url_abs_path or "/"
    link = f"{resolve_url(settings.LOGIN_URL)}?{urlencode({'next': back})}"
    return _render(request, 401, SIGNED_OUT, link=link, link_text="Sign in")


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """`CSRF_FAILURE_VIEW`: a form from a page loaded before its user signed in again (which changes the token), or
    from elsewhere. Django's `reason` is for the log, not the page."""
    return _render(request, 403, STALE_FORM)


def reason(status: int, exception: Exception | None) -> str:
    """The exception's own sentence, when it was raised with one; the status's general sentence otherwise."""
    message = exception.args[0] if exception is not None and exception.args else None
    return message if isinstance(message, str) and message.strip() else GENERAL[status]


def _page(request: HttpRequest, status: int, exception: Exception | None) -> HttpResponse:
    return _render(request, status, reason(status, exception))


def _render(request: HttpRequest, status: int, text: str, **link) -> HttpResponse:
    """`link`: `link` and `link_text`, a way on offered under the reason."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": text}, status=status)
    return render(request, "error.html", {"status": status, "title": TITLES[status], "reason": text, **link},
                  status=status)
