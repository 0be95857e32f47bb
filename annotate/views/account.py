"""Your account: change your password (Django's view, the site's page), choose the time zone of your pages and
give the address your set-password links are mailed to."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.auth.views import PasswordChangeView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from annotate.forms import EmailForm, TimeZoneForm
from annotate.middleware import TIME_ZONE_COOKIE, account_zone, browser_zone
from annotate.models import AccountSettings

TEMPLATE = "registration/password_change_form.html"


def _context(request: HttpRequest, **forms) -> dict:
    browser = request.COOKIES.get(TIME_ZONE_COOKIE, "")
    forms.setdefault("form", PasswordChangeForm(request.user))
    forms.setdefault("zone_form", TimeZoneForm(initial={"time_zone": account_zone(request.user)}))
    forms.setdefault("email_form", EmailForm(user=request.user, initial={"email": request.user.email}))
    return {**forms, "browser_zone": browser if browser_zone(browser) else "", "sends_email": settings.TC_EMAIL}


class AccountPage(PasswordChangeView):
    """Django's password change, on a page that also holds the time zone choice."""

    template_name = TEMPLATE

    def get_form(self, form_class=None):
        form = super().get_form(form_class)
        # Django focuses the old password; here it would pull a visitor who came for the time zone away from it.
        form.fields["old_password"].widget.attrs.pop("autofocus", None)
        return form

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        return {**context, **_context(self.request, form=context["form"])}


@require_POST
@login_required
def time_zone(request: HttpRequest) -> HttpResponse:
    """Keep the zone the user's pages use on every browser, or (empty) follow each browser's own."""
    form = TimeZoneForm(request.POST)
    if not form.is_valid():
        return render(request, TEMPLATE, _context(request, zone_form=form), status=400)
    chosen = form.cleaned_data["time_zone"]
    AccountSettings.objects.update_or_create(user=request.user, defaults={"time_zone": chosen})
    messages.success(request, f"Times are now shown in {chosen} on every browser you use." if chosen
                     else "Times now follow the time zone of each browser you use.")
    return redirect("password_change")


@require_POST
@login_required
def email(request: HttpRequest) -> HttpResponse:
    """Keep the address a set-password link is mailed to (a forgotten password, an admin's new link), or remove it."""
    form = EmailForm(request.POST, user=request.user)
    if not form.is_valid():
        return render(request, TEMPLATE, _context(request, email_form=form), status=400)
    address = form.cleaned_data["email"]
    get_user_model().objects.filter(pk=request.user.pk).update(email=address)
    messages.success(request, f"Set-password links for you now go to {address}." if address
                     else "Your account has no email address now: set-password links come from an admin.")
    return redirect("password_change")
