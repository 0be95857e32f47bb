"""The site's own settings, plus a Server-Timing header on every response and the baseline view's URL."""

from annotate.settings import *  # noqa: F403

MIDDLEWARE = ["scale_site.timing.ServerTiming", *MIDDLEWARE]  # noqa: F405 - first, so it times all the others
ROOT_URLCONF = "scale_site.urls"
