"""The site's URLs plus `bench/baseline/<pk>/`: one indexed SELECT, the yardstick of the other pages."""

from __future__ import annotations

from django.http import HttpResponse
from django.urls import include, path
from django.views.decorators.http import require_GET

from annotate.models import Item


@require_GET
def baseline(request, pk: int) -> HttpResponse:
    """One primary-key SELECT and a tiny response: what any page costs before it does its own work."""
    found = Item.objects.filter(pk=pk).values_list("id", flat=True).first()
    return HttpResponse(f"{found}\n", content_type="text/plain")


urlpatterns = [
    path("bench/baseline/<int:pk>/", baseline, name="bench_baseline"),
    path("", include("annotate.urls")),
]
