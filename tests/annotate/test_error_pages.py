"""The error pages say why, in the site's layout (JSON under `api/`), and never show an exception's class name."""

from __future__ import annotations

import json

import pytest
from django.test import RequestFactory
from django.urls import reverse
from django.views.defaults import server_error

pytestmark = pytest.mark.django_db


def test_a_missing_project_says_so_in_the_site_layout(client, reviewer) -> None:
    client.force_login(reviewer)
    response = client.get(reverse("project_detail", args=["no-such-project"]))
    page = response.content.decode()
    assert response.status_code == 404
    assert 'data-error-reason>No such project.</p>' in page
    assert "Sign out" in page and 'href="/">Back to your projects</a>' in page


def test_an_unknown_address_gets_a_sentence_not_a_class_name(client, reviewer) -> None:
    client.force_login(reviewer)
    page = client.get("/no/such/page/").content.decode()
    assert "There is nothing at this address, or it is not yours to see." in page
    assert "Resolver404" not in page and "Http404" not in page


def test_a_reviewer_on_an_admin_page_is_told_who_may(client, project, reviewer) -> None:
    client.force_login(reviewer)
    response = client.get(reverse("project_settings", args=[project.slug]))
    assert response.status_code == 403
    assert "data-error-reason>Only the project&#x27;s admins can do this.</p>" in response.content.decode()


def test_a_bad_request_gets_the_general_sentence(client) -> None:
    response = client.get("/", headers={"host": "evil.example"})  # not in ALLOWED_HOSTS
    assert response.status_code == 400
    page = response.content.decode()
    assert "The request could not be understood. Nothing was changed." in page
    assert "evil.example" not in page  # what the exception says is for the log, not the page


def test_the_api_answers_errors_in_json(client) -> None:
    response = client.get("/api/no-such-endpoint")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {
        "error": 'no API address /api/no-such-endpoint (the README\'s "JSON API" lists them)'}


def test_the_server_error_page_renders_without_a_request_context() -> None:
    response = server_error(RequestFactory().get("/"))
    page = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong on the server; it has been" in page and 'href="/">Back to your projects' in page


def test_an_htmx_request_from_a_signed_out_user_gets_401_and_a_way_back(client, project) -> None:
    """The sign-in page must not be swapped into the workspace: the reviewer's answer stays on the page."""
    from annotate.views.errors import SIGNED_OUT

    here = f"/projects/{project.slug}/items/7/"
    response = client.post(reverse("review_next", args=[project.slug]),
                           headers={"hx-request": "true", "hx-current-url": f"http://testserver{here}"})
    page = response.content.decode()
    assert response.status_code == 401
    assert f"data-error-reason>{SIGNED_OUT}</p>".replace("'", "&#x27;") in page
    assert 'href="/accounts/login/?next=%2Fprojects%2Foutages%2Fitems%2F7%2F" data-error-link' in page


def test_a_plain_request_from_a_signed_out_user_still_goes_to_sign_in(client, project) -> None:
    response = client.post(reverse("review_next", args=[project.slug]))
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/?next=")


def test_a_form_with_a_stale_csrf_token_says_to_reload(project, project_admin) -> None:
    from django.test import Client

    from annotate.models import Project

    client = Client(enforce_csrf_checks=True)
    client.force_login(project_admin)
    client.get(reverse("project_settings", args=[project.slug]))  # sets the CSRF cookie
    response = client.post(reverse("project_settings", args=[project.slug]),
                           {"name": "Renamed", "csrfmiddlewaretoken": "x" * 32})
    assert response.status_code == 403
    assert "This form has expired (you signed in again since the page was loaded" in response.content.decode()
    assert Project.objects.get(pk=project.pk).name == project.name


def test_an_action_opened_as_a_page_says_so_instead_of_a_blank_page(client, project, reviewer) -> None:
    client.force_login(reviewer)
    response = client.get(reverse("review_next", args=[project.slug]))
    assert response.status_code == 405
    assert response["Allow"] == "POST"
    assert ("data-error-reason>This address is an action, not a page: it takes POST from a form, so opening it did "
            "nothing.</p>") in response.content.decode()

    refused = client.post(reverse("item_detail", args=[project.slug, 1]))
    assert refused.status_code == 405 and refused["Allow"] == "GET"
    assert "This address takes only GET. Nothing was changed." in refused.content.decode()
