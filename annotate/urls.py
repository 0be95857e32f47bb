"""Root URLs: the reviewer pages, sign-in and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from annotate import views

urlpatterns = [
    path("", views.home, name="home"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]
