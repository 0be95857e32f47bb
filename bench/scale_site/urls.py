"""The site's URLs plus `bench/baseline/<pk>/` (one indexed SELECT, the yardstick of the other pages) and
`bench/baseline-signed-in/<pk>/` (the same behind sign-in: the session and the user are read first); and the
collected static files at `static/`, which a deployment's web server serves, for `bench/keyboard_flow.py`'s
browser."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.http import require_GET
from django.views.static import serve

from annotate.models import Item


@require_GET
def baseline(request, pk: int) -> HttpResponse:
    """One primary-key SELECT and a tiny response: what any page costs before it does its own work."""
    found = Item.objects.filter(pk=pk).values_list("id", flat=True).first()
    return HttpResponse(f"{found}\n", content_type="text/plain")


@require_GET
@login_required
def signed_in_baseline(request, pk: int) -> HttpResponse:
    """The baseline behind sign-in: what any reviewer page costs before its own work (session, user, SELECT)."""
    found = Item.objects.filter(pk=pk).values_list("id", flat=True).first()
    return HttpResponse(f"{found}\n", content_type="text/plain")


urlpatterns = [
    path("bench/baseline/<int:pk>/", baseline, name="bench_baseline"),
    path("bench/baseline-signed-in/<int:pk>/", signed_in_baseline, name="bench_baseline_signed_in"),
    path("", include("annotate.urls")),
    path("static/<path:path>", serve, {"document_root": settings.STATIC_ROOT}),
]
