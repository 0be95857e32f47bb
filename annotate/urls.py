"""Root URLs: the reviewer pages, the JSON API, training jobs, sign-in and the admin."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from annotate.forms import AdminSignInForm, SignInForm
from annotate.views import account, agreement, items, pages, progress, projects, review, transfer

project = "projects/<slug:slug>/"
admin.site.login_form = AdminSignInForm  # failed sign-ins are limited there too

urlpatterns = [
    # Pages without the site's <link rel="icon"> (the admin's) make browsers ask for /favicon.ico.
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("", pages.home, name="home"),
    path("projects/new/", projects.project_create, name="project_create"),
    path("guidelines/preview/", projects.guidelines_preview, name="guidelines_preview"),
    path(project, pages.project_detail, name="project_detail"),
    path(project + "settings/", projects.project_settings, name="project_settings"),
    path(project + "delete/", projects.project_delete, name="project_delete"),
    path(project + "members/", projects.member_add, name="member_add"),
    path(project + "members/<int:pk>/remove/", projects.member_remove, name="member_remove"),
    path(project + "members/<int:pk>/link/", projects.member_link, name="member_link"),
    path(project + "members/<int:pk>/active/", projects.member_active, name="member_active"),
    path(project + "version/", projects.version_select, name="version_select"),
    path(project + "predictions/requeue/", projects.predictions_requeue, name="predictions_requeue"),
    path(project + "refused/inputs/", projects.refused_inputs, name="refused_inputs"),
    path(project + "refused/remove/", projects.refused_remove, name="refused_remove"),
    path(project + "import/", transfer.project_import, name="project_import"),
    path(project + "import/<int:pk>/status/", transfer.import_status, name="import_status"),
    path(project + "experience/", transfer.experience_upload, name="experience_upload"),
    path(project + "experience/<int:pk>/status/", transfer.upload_status, name="upload_status"),
    path(project + "experience/<int:pk>/remove/", transfer.upload_remove, name="upload_remove"),
    path(project + "exports/", transfer.export_create, name="export_create"),
    path(project + "exports/<int:pk>/status/", transfer.export_status, name="export_status"),
    path(project + "exports/<int:pk>/download/", transfer.export_download, name="export_download"),
    path(project + "review/next/", review.review_next, name="review_next"),
    path(project + "review/undo/", review.review_undo, name="review_undo"),
    path(project + "items/", items.item_list, name="item_list"),
    path(project + "items/delete/", items.items_delete, name="items_delete"),
    path(project + "items/deletions/<int:pk>/", items.items_deletion, name="items_deletion"),
    path(project + "items/deletions/<int:pk>/stop/", items.items_deletion_stop, name="items_deletion_stop"),
    path(project + "progress/", progress.progress, name="project_progress"),
    path(project + "progress/mine/", progress.my_progress, name="my_progress"),
    path(project + "progress/agreement/", progress.progress_agreement, name="progress_agreement"),
    path(project + "items/<int:pk>/", review.item_detail, name="item_detail"),
    path(project + "items/<int:pk>/trace/", review.item_trace, name="item_trace"),
    path(project + "items/<int:pk>/submit/", review.item_submit, name="item_submit"),
    path(project + "items/<int:pk>/skip/", review.item_skip, name="item_skip"),
    path(project + "items/<int:pk>/keep/", review.item_keep, name="item_keep"),
    path(project + "items/<int:pk>/inputs/", review.item_fix_inputs, name="item_fix_inputs"),
    path(project + "items/<int:pk>/typed/", review.item_typed, name="item_typed"),
    path(project + "agreement/", agreement.agreement_page, name="agreement_page"),
    path(project + "disagreements/", agreement.disagreement_list, name="disagreement_list"),
    path(project + "disagreements/distribution/", agreement.adjudicate_all_distribution,
         name="adjudicate_all_distribution"),
    path(project + "items/<int:pk>/adjudicate/", agreement.adjudication_page, name="adjudication_page"),
    path(project + "items/<int:pk>/adjudicate/submit/", agreement.adjudicate, name="adjudicate"),
    # A forgotten password: a link by email when the site sends email, else from an admin (annotate.accounts).
    path("accounts/password_reset/", pages.password_forgotten, name="password_reset"),
    path("accounts/login/", LoginView.as_view(authentication_form=SignInForm), name="login"),
    path("accounts/password_change/", account.AccountPage.as_view(), name="password_change"),
    path("accounts/time-zone/", account.time_zone, name="account_time_zone"),
    path("accounts/email/", account.email, name="account_email"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]

# The JSON API (annotate.api_urls) and training jobs (trainingjobs.urls) are mounted when their modules exist,
# so each area can land on its own.
for prefix, module in (("api/", "annotate.api_urls"), ("jobs/", "trainingjobs.urls")):
    try:
        urlpatterns.append(path(prefix, include(module)))
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise

handler400 = "annotate.views.errors.bad_request"
handler403 = "annotate.views.errors.permission_denied"
handler404 = "annotate.views.errors.not_found"
