"""Guidelines are Markdown: formatting works, nothing in them runs in a reviewer's page, old plain text reads as
before, and the item and project pages show them rendered."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotate import guidelines, queue
from annotate.guidelines import to_html
from tests.annotate.conftest import make_ready_items


def test_markdown_formats_lists_emphasis_tables_and_links_that_open_in_a_new_tab() -> None:
    html = to_html("Pick the **cause**, not a *symptom*.\n\n- one\n- two\n\n"
                   "| key | does |\n|---|---|\n| 1 | picks |\n\nSee [the runbook](https://wiki.example.org/runbook).")

    assert "<strong>cause</strong>" in html and "<em>symptom</em>" in html
    assert "<ul>\n<li>one</li>\n<li>two</li>\n</ul>" in html
    assert "<th>key</th>" in html and "<td>picks</td>" in html
    link = '<a href="https://wiki.example.org/runbook" target="_blank" rel="noopener noreferrer">the runbook</a>'
    assert link in html


def test_nothing_in_guidelines_can_run_in_the_page() -> None:
    html = to_html('<script>alert(1)</script> <img src=x onerror="alert(2)">\n\n[click](javascript:alert(3)) '
                   "[data](data:text/html;base64,PHNjcmlwdD4=)")

    assert "<script>" not in html and "<img" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "href" not in html  # the scripting links stay text


def test_plain_text_guidelines_keep_their_line_breaks_and_headings_sit_under_the_page() -> None:
    assert to_html("Read the evidence first.\nThen pick.") == "<p>Read the evidence first.<br />\nThen pick.</p>\n"
    html = to_html("# Rules\n\n## Edge cases\n\n###### Deepest")
    assert "<h3>Rules</h3>" in html and "<h4>Edge cases</h4>" in html and "<h6>Deepest</h6>" in html
    assert "<h1>" not in html and "<h2>" not in html


def test_each_text_is_rendered_once_and_a_very_long_one_is_not_kept(monkeypatch) -> None:
    calls = []
    render = guidelines._MARKDOWN.render
    monkeypatch.setattr(guidelines._MARKDOWN, "render", lambda text: calls.append(text) or render(text))
    guidelines._cached.cache_clear()

    assert to_html("kept **once**") == to_html("kept **once**")
    long = "x" * (guidelines.CACHED_UP_TO + 1)
    to_html(long)
    to_html(long)

    assert calls == ["kept **once**", long, long]


@pytest.mark.django_db
def test_the_item_and_project_pages_show_the_guidelines_rendered(client, project, reviewer) -> None:
    project.guidelines = "Pick the **cause**.\n\n- not the symptom"
    project.save(update_fields=["guidelines"])
    (item,) = make_ready_items(project, [0.1])
    queue.claim_next(project, reviewer)
    client.force_login(reviewer)

    for url in (reverse("item_detail", args=[project.slug, item.pk]), reverse("project_detail", args=[project.slug])):
        page = client.get(url).content.decode()
        assert '<div class="guidelines"><p>Pick the <strong>cause</strong>.</p>\n<ul>\n<li>not the symptom</li>' in page


@pytest.mark.django_db
def test_the_preview_renders_what_an_admin_types_and_is_theirs_alone(client, project, project_admin,
                                                                     reviewer) -> None:
    url = reverse("guidelines_preview")
    client.force_login(project_admin)

    page = client.post(url, {"guidelines": "Pick the **cause**."}, HTTP_HX_REQUEST="true").content.decode()
    assert '<div id="guidelines-preview" class="guidelines"' in page and "<strong>cause</strong>" in page
    assert "Nothing to preview yet" in client.post(url, {"guidelines": ""}).content.decode()
    too_long = client.post(url, {"guidelines": "x" * (guidelines.CACHED_UP_TO + 1)})
    assert too_long.status_code == 400 and "are not previewed" in too_long.content.decode()
    assert client.get(url).status_code == 405

    settings_page = client.get(reverse("project_settings", args=[project.slug])).content.decode()
    assert f'hx-post="{url}" hx-include="#id_guidelines"' in settings_page

    client.force_login(reviewer)  # a reviewer admins no project: writes no guidelines
    assert client.post(url, {"guidelines": "x"}).status_code == 403
    client.logout()
    assert client.post(url, {"guidelines": "x"}).status_code == 302
