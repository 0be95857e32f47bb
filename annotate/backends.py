"""The site's authentication backend: Django's, reading the signed-in user's own settings in the same query."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, backends

from annotate import hotpath


class ModelBackend(backends.ModelBackend):
    """Django's `ModelBackend`, but the user comes with their `AccountSettings` (the time zone every page needs)
    in one query rather than two, and that query is fixed SQL (`annotate.hotpath`): building Django's took longer
    than running it."""

    def get_user(self, user_id):
        user = hotpath.user_with_settings(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None


class EarlierSessions:
    """Sessions signed in before the site used this backend name Django's own, which Django would no longer
    accept: everyone would be signed out once, on the upgrade. Such a session is moved to this backend instead.

    Between `SessionMiddleware` and `AuthenticationMiddleware`. Sessions last two weeks (`SESSION_COOKIE_AGE`), so
    two weeks after every site has upgraded this can go.
    """

    EARLIER = "django.contrib.auth.backends.ModelBackend"
    NOW = "annotate.backends.ModelBackend"

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if settings.SESSION_COOKIE_NAME in request.COOKIES and request.session.get(BACKEND_SESSION_KEY) == self.EARLIER:
            request.session[BACKEND_SESSION_KEY] = self.NOW
        return self.get_response(request)
