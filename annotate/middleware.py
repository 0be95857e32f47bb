"""Middleware of the site's own."""

from __future__ import annotations

import functools
import zoneinfo
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.shortcuts import resolve_url
from django.urls import Resolver404, resolve
from django.utils import timezone

from annotate.storage import mib
from annotate.views import errors


class BodyLimit:
    """Refuse a form's body over what its address takes (413) before anything reads it.

    Django writes a form's files to disk as it parses the body, whatever their size, and the CSRF check parses it
    for every form post before the view (and its sign-in check) runs: without this, anyone with the site's cookie
    could fill the disk with one request. So a body is measured here, first, by its `Content-Length` (a WSGI
    request reads no further than that): the addresses that take uploads allow their file's limit
    (`TC_IMPORT_MAX_BYTES`, ...) and a little for the form around it, every other form
    `DATA_UPLOAD_MAX_MEMORY_SIZE`. Only a body over that default costs a URL lookup. JSON and other bodies are
    read by their views, each with its own limit.
    """

    FORMS = ("multipart/form-data", "application/x-www-form-urlencoded")
    FORM_SLACK = 64 * 1024  # the form's other fields and its multipart boundaries

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        length = request.META.get("CONTENT_LENGTH") or ""
        if length.isdigit() and int(length) > self.default() and request.content_type in self.FORMS:
            limit, allowed = self.limit(request.path_info)
            if int(length) > limit + self.FORM_SLACK:
                return errors.too_large(request, f"This request is {mib(int(length))}: {allowed}. Nothing was "
                                                 "read or kept.")
        return self.get_response(request)

    @staticmethod
    def default() -> int:
        return (settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 2_621_440) + BodyLimit.FORM_SLACK

    def limit(self, path: str) -> tuple[int, str]:
        """What the address `path` takes, in bytes, besides the form around it; and that limit in words."""
        from annotate import imports, versions

        try:
            name = resolve(path).view_name
        except Resolver404:
            name = ""
        if name in ("project_import", "api:imports"):
            size = imports.max_upload_bytes()
            return size, f"an items file may be at most {mib(size)} (TC_IMPORT_MAX_BYTES)"
        if name == "api:items":  # JSON, which `curl --data-binary` sends labelled as a form
            size = imports.max_api_items_bytes()
            return size, f"a body of items may be at most {mib(size)} (TC_API_ITEMS_MAX_BYTES)"
        if name == "experience_upload":
            size = imports.max_experience_bytes()
            return size, f"an experience file may be at most {mib(size)} (TC_EXPERIENCE_MAX_BYTES)"
        if name in ("trainingjobs:version_upload", "api:versions"):
            size = versions.max_model_bytes()
            return (size + versions.MAX_MANIFEST_BYTES,
                    f"a model's weights may be at most {mib(size)} (TC_MODEL_MAX_BYTES), its tool.json 1 MiB")
        default = self.default() - self.FORM_SLACK
        return default, f"a form here may send at most {mib(default)}"


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


TIME_ZONE_COOKIE = "tc_tz"


@functools.lru_cache(maxsize=1)
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


def browser_zone(name: str) -> zoneinfo.ZoneInfo | None:
    """The IANA time zone `name` names (as the browser's `Intl` reports it), or None when it names none.

    Only names in the system's time zone database count: the cookie is the user's to change, and a key is a
    path inside that database."""
    return zoneinfo.ZoneInfo(name) if name in _zone_names() else None


@functools.lru_cache(maxsize=1)
def zone_names() -> tuple[str, ...]:
    """Every zone a user may choose, sorted once (the account page's list)."""
    return tuple(sorted(_zone_names()))


def account_zone(user) -> str:
    """The time zone `user` chose on their account page, or "" (follow the browser)."""
    if not user.is_authenticated:
        return ""
    try:
        return user.account_settings.time_zone
    except ObjectDoesNotExist:
        return ""


class BrowserTimeZone:
    """Times on the pages read in the user's own time zone: the one they chose on their account page, else their
    browser's, which `static/timezone.js` keeps in a cookie.

    Without either (a first page, a client without JavaScript) or with a name the database lacks, times stay
    in `TIME_ZONE` (UTC). The footer says which zone a page uses. JSON and exports keep ISO 8601 with offsets.
    The account's choice comes with the user (`annotate.backends`): a signed-in page loads the user anyway.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        _zone_names()  # reads the time zone database (about 80 ms) as the site starts, not in a request

    def __call__(self, request):
        zone = browser_zone(account_zone(request.user))
        request.time_zone_chosen = zone is not None  # else the browser's, from the cookie
        if zone is None:
            zone = browser_zone(request.COOKIES.get(TIME_ZONE_COOKIE, ""))
        if zone is None:
            timezone.deactivate()
        else:
            timezone.activate(zone)
        return self.get_response(request)
