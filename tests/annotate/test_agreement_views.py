"""Agreement, disagreement and adjudication pages: who sees them, what they show, what a POST stores."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotate import queue
from annotate.models import Adjudication, Answer, Membership, Project, Role
from tests.annotate.conftest import make_ready_items as ready_items

pytestmark = pytest.mark.django_db
HX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def labelled(project, reviewer, second_reviewer):
    """Overlap 2: rita and sam disagree on the first item ("db" / "dns") and agree on the second."""
    Project.objects.filter(pk=project.pk).update(overlap=2)
    project.refresh_from_db()
    items = ready_items(project, [0.1, 0.2])
    for item, targets in zip(items, (("db", "dns"), ("db", "db")), strict=True):
        for user, target in zip((reviewer, second_reviewer), targets, strict=True):
            assert queue.claim_next(project, user) == item
            queue.submit(item, user, target)
    return items


def _urls(project, item) -> dict[str, str]:
    return {
        "agreement": reverse("agreement_page", args=[project.slug]),
        "list": reverse("disagreement_list", args=[project.slug]),
        "page": reverse("adjudication_page", args=[project.slug, item.pk]),
        "post": reverse("adjudicate", args=[project.slug, item.pk]),
        "all": reverse("adjudicate_all_distribution", args=[project.slug]),
    }


def test_agreement_page_shows_percent_agreement_kappa_and_pairs(client, project, project_admin, labelled) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("agreement_page", args=[project.slug])).content.decode()

    assert '<strong id="percent-agreement">50%</strong>' in page
    assert '<strong id="fleiss-kappa">-0.33</strong>' in page and "worse than chance" in page
    assert "<td>rita · sam</td><td>2</td><td>1</td><td>50%</td>" in page
    assert '<svg class="pair-chart"' in page and 'width="100.0"' in page


def test_agreement_page_explains_what_to_do_when_nothing_can_be_compared(client, project, project_admin) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("agreement_page", args=[project.slug])).content.decode()

    assert "Nothing to compare yet" in page and "overlap 1" in page
    # Headed like the project's other sections (Items, Progress, Training, Settings): the page, then the project.
    assert page.index("<h1>Agreement</h1>") < page.index(f'<a href="{reverse("project_detail", args=[project.slug])}">')


def test_reviewers_get_403_and_outsiders_404_on_every_agreement_page(client, project, reviewer, outsider,
                                                                     labelled) -> None:
    urls = _urls(project, labelled[0])
    for user, status in ((reviewer, 403), (outsider, 404)):
        client.force_login(user)
        for name in ("agreement", "list", "page"):
            assert client.get(urls[name]).status_code == status, (user, name)
        for name in ("post", "all"):
            assert client.post(urls[name], {"answer": "1"}).status_code == status, (user, name)
    assert not Adjudication.objects.exists()


def test_another_projects_admin_cannot_reach_this_project(client, project, labelled, outsider) -> None:
    other = Project.objects.create(slug="other", name="Other", tool="decision", mode="rank")
    Membership.objects.create(project=other, user=outsider, role=Role.ADMIN)
    client.force_login(outsider)

    urls = _urls(project, labelled[0])
    assert client.get(urls["page"]).status_code == 404
    assert client.post(urls["post"], {"choice": "db"}).status_code == 404
    # Nor can this project's item be reached through the other project's address.
    assert client.get(reverse("adjudication_page", args=["other", labelled[0].pk])).status_code == 404


def test_disagreement_list_shows_open_items_with_each_reviewers_target(client, project, project_admin,
                                                                      labelled) -> None:
    split, agreed = labelled
    client.force_login(project_admin)

    page = client.get(reverse("disagreement_list", args=[project.slug])).content.decode()

    assert reverse("adjudication_page", args=[project.slug, split.pk]) in page
    assert reverse("adjudication_page", args=[project.slug, agreed.pk]) not in page
    assert "The database was unreachable." in page and "A DNS record expired." in page


def test_disagreement_list_filters_with_htmx_and_keeps_adjudicated_items_under_all(
    client, project, project_admin, labelled
) -> None:
    split, _ = labelled
    client.force_login(project_admin)
    client.post(reverse("adjudicate", args=[project.slug, split.pk]), {"choice": "db"})
    url = reverse("disagreement_list", args=[project.slug])

    open_items = client.get(url, **HX).content.decode()
    every = client.get(url + "?show=all", **HX).content.decode()

    assert open_items.startswith("{#") or open_items.lstrip().startswith('<section id="disagreements"')
    assert "No open disagreements." in open_items
    assert f"Item {split.pk}</a>" in every and ">Written</span> by ada" in every


def test_empty_disagreement_list_says_why(client, project, project_admin) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("disagreement_list", args=[project.slug])).content.decode()

    assert "No disagreements yet." in page and "No item has targets from two reviewers" in page


def test_adjudication_page_shows_each_target_side_by_side_with_pick_keys(client, project, project_admin,
                                                                        labelled) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("adjudication_page", args=[project.slug, labelled[0].pk])).content.decode()

    assert 'aria-label="rita\'s target"' in page and 'aria-label="sam\'s target"' in page
    assert 'data-shortcut="1">Pick this <kbd>1</kbd>' in page and 'data-shortcut="2">Pick this <kbd>2</kbd>' in page
    assert 'data-shortcut="d">Use this distribution' in page
    assert 'name="choice"' in page  # the write-your-own editor is the reviewers' choice editor


def test_adjudication_cards_show_how_a_reviewer_changed_their_target(client, project, project_admin, reviewer,
                                                                     labelled) -> None:
    """An adjudicator weighing rita's "dns" sees she first gave "db"; sam's unchanged target has no history."""
    item = labelled[0]
    queue.submit(item, reviewer, "dns")  # rita changes her mind (she had given "db")
    client.force_login(project_admin)

    page = client.get(reverse("adjudication_page", args=[project.slug, item.pk])).content.decode()

    history = page.split('aria-label="rita\'s target"')[1].split("</article>")[0]
    assert "Changed 1 time</summary>" in history
    assert history.index("The database was unreachable. (db)") < history.index("A DNS record expired. (dns)")
    assert "(now)" in history
    assert page.count('class="answer-history') == 1  # sam's card has none


def test_picking_an_answer_with_htmx_stores_it_and_answers_with_the_workspace(client, project, project_admin,
                                                                             second_reviewer, labelled) -> None:
    split, _ = labelled
    sams = Answer.objects.get(item=split, reviewer=second_reviewer)
    client.force_login(project_admin)

    response = client.post(reverse("adjudicate", args=[project.slug, split.pk]), {"answer": sams.pk}, **HX)

    body = response.content.decode()
    assert response.status_code == 200 and 'id="workspace"' in body
    assert f"Item {split.pk} adjudicated: picked sam&#x27;s answer." in body
    stored = Adjudication.objects.get()
    assert (stored.target, stored.chosen_answer, stored.source) == ("dns", sams, f"adjudication:outages/{split.pk}/ada")


def test_a_written_target_and_the_distribution_are_stored(client, project, project_admin, labelled) -> None:
    split, _ = labelled
    client.force_login(project_admin)
    url = reverse("adjudicate", args=[project.slug, split.pk])

    client.post(url, {"split": "1", "share-0": "3", "share-1": "1", "note": "mostly the database"})
    assert (Adjudication.objects.get().target, Adjudication.objects.get().note) == ([0.75, 0.25],
                                                                                   "mostly the database")
    client.post(url, {"distribution": "1"})
    assert Adjudication.objects.get().target == [0.5, 0.5]


def test_adjudicating_an_item_without_disagreement_is_refused_in_place(client, project, project_admin,
                                                                       labelled) -> None:
    _, agreed = labelled
    client.force_login(project_admin)
    url = reverse("adjudicate", args=[project.slug, agreed.pk])

    plain = client.post(url, {"choice": "dns"})
    htmx = client.post(url, {"choice": "dns"}, **HX)

    assert plain.status_code == 409
    assert "nothing to adjudicate: its reviewers do not disagree (all 2 final targets agree)" in plain.content.decode()
    assert htmx["HX-Retarget"] == "#adjudicate-error" and "nothing to adjudicate" in htmx.content.decode()
    assert not Adjudication.objects.exists()
    page = client.get(reverse("adjudication_page", args=[project.slug, agreed.pk])).content.decode()
    assert "there is nothing to adjudicate" in page and "Pick this" not in page


def test_an_incomplete_or_foreign_request_is_refused_and_nothing_stored(client, project, project_admin,
                                                                        labelled) -> None:
    split, agreed = labelled
    client.force_login(project_admin)
    url = reverse("adjudicate", args=[project.slug, split.pk])
    foreign = Answer.objects.filter(item=agreed).first()

    empty = client.post(url, {}, **HX)
    assert "Choose a candidate" in empty.content.decode()
    assert client.post(url, {"answer": foreign.pk}).status_code == 404
    assert client.post(url, {"answer": "x"}).status_code == 400
    assert not Adjudication.objects.exists()


def test_adjudication_posts_need_the_csrf_token(project, project_admin, labelled) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(project_admin)
    urls = _urls(project, labelled[0])

    assert client.post(urls["post"], {"choice": "db"}).status_code == 403
    assert client.post(urls["all"]).status_code == 403
    assert not Adjudication.objects.exists()


def test_every_open_item_is_adjudicated_with_its_distribution(client, project, project_admin, labelled) -> None:
    client.force_login(project_admin)

    response = client.post(reverse("adjudicate_all_distribution", args=[project.slug]), follow=True)

    assert "1 item adjudicated with the reviewers&#x27; distribution" in response.content.decode()
    assert Adjudication.objects.get().target == [0.5, 0.5]


def test_project_page_links_agreement_pages_for_admins_only(client, project, project_admin, reviewer,
                                                           labelled) -> None:
    url = reverse("project_detail", args=[project.slug])
    client.force_login(project_admin)
    page = client.get(url).content.decode()
    assert reverse("agreement_page", args=[project.slug]) in page and "1 open</span>" in page

    client.force_login(reviewer)
    assert reverse("agreement_page", args=[project.slug]) not in client.get(url).content.decode()


def test_settings_say_why_the_overlap_cannot_be_lowered_below_existing_answers(client, project, project_admin,
                                                                              labelled) -> None:
    client.force_login(project_admin)

    response = client.post(reverse("project_settings", args=[project.slug]), {
        "name": "Outages", "guidelines": "Pick the cause.", "configuration": '{"dim": 8, "buckets": 64}',
        "overlap": 1, "lease_seconds": 600,
    })

    assert "Some items already have 2 answers; the overlap cannot be lower than that." in response.content.decode()
    project.refresh_from_db()
    assert project.overlap == 2


def _other_target(mode: str, target, inputs):
    """A valid target of the same form that disagrees with `target`."""
    if mode == "rank":
        from annotate.agreement import candidate_ids

        return 1 if candidate_ids(inputs).index(target) == 0 else 0  # an index: another candidate
    if mode == "verification":
        return "contradiction"
    if mode == "retrieval":
        return [list(reversed(row)) for row in target]
    if mode == "outcomes":
        return {**target, "outcome": target["outcome"] + 10}
    return target + " (edited)"


@pytest.mark.parametrize(("tool", "mode"), [
    ("decision", "rank"), ("investigator", "rank"), ("scene", "rank"), ("investigator", "verification"),
    ("investigator", "retrieval"), ("investigator", "proposal"), ("planner", "outcomes"), ("planner", "proposal"),
    ("scene", "language"), ("chatbot", "reply"),
])
def test_every_tool_mode_lists_and_adjudicates_its_disagreements(client, project_admin, reviewer, second_reviewer,
                                                                 tool, mode) -> None:
    from annotate import agreement
    from tests.annotate.ui_samples import sample

    data = sample(tool, mode)
    project = Project.objects.create(slug=f"{tool}-{mode}", name=f"{tool} {mode}", tool=tool, mode=mode, overlap=2)
    for user, role in ((project_admin, Role.ADMIN), (reviewer, Role.REVIEWER), (second_reviewer, Role.REVIEWER)):
        Membership.objects.create(project=project, user=user, role=role)
    item = project.items.create(inputs=data["inputs"], status="done", final_answers=2)
    other = _other_target(mode, data["target"], data["inputs"])
    for user, target in ((reviewer, data["target"]), (second_reviewer, other)):
        Answer.objects.create(item=item, reviewer=user, kind="target", target=target, source="s")
    item.disagreement = agreement.item_disagreement(item)
    item.save()
    assert item.disagreement
    client.force_login(project_admin)

    listed = client.get(reverse("disagreement_list", args=[project.slug]))
    page = client.get(reverse("adjudication_page", args=[project.slug, item.pk])).content.decode()
    picked = client.post(reverse("adjudicate", args=[project.slug, item.pk]),
                         {"answer": Answer.objects.get(reviewer=second_reviewer).pk}, **HX)

    assert listed.status_code == 200 and f"Item {item.pk}</a>" in listed.content.decode()
    assert page.count("Pick this") == 2 and ('data-shortcut="d"' in page) == (mode == "rank")
    assert picked.status_code == 200 and "adjudicated: picked sam" in picked.content.decode()
    assert Adjudication.objects.get(item=item).target == Answer.objects.get(reviewer=second_reviewer).target
    assert client.get(reverse("agreement_page", args=[project.slug])).status_code == 200


def test_the_item_page_links_admins_to_the_adjudication_of_a_disagreement(client, project, project_admin,
                                                                          labelled) -> None:
    split, agreed = labelled
    client.force_login(project_admin)
    link = reverse("adjudication_page", args=[project.slug, split.pk])

    assert link in client.get(reverse("item_detail", args=[project.slug, split.pk])).content.decode()
    assert "adjudicate</a>" not in client.get(reverse("item_detail", args=[project.slug, agreed.pk])).content.decode()


def test_the_agreement_page_follows_a_changed_answer(client, project, project_admin, second_reviewer,
                                                     labelled) -> None:
    """The report is cached, but only until a final target changes."""
    client.force_login(project_admin)
    url = reverse("agreement_page", args=[project.slug])
    assert '<strong id="percent-agreement">50%</strong>' in client.get(url).content.decode()

    queue.submit(labelled[0], second_reviewer, "db")  # sam now agrees on the first item

    assert '<strong id="percent-agreement">100%</strong>' in client.get(url).content.decode()


def test_a_slow_report_is_shown_for_a_while_after_answers_change_and_says_so(
        client, project, project_admin, second_reviewer, labelled, monkeypatch) -> None:
    """At 100,000 compared items the report takes 1.6 s: while reviewers keep answering it is reused (30 s)."""
    from django.core.cache import cache

    from annotate import agreement

    cache.clear()
    monkeypatch.setattr(agreement, "SLOW_SECONDS", 0.0)  # every report counts as slow here
    client.force_login(project_admin)
    url = reverse("agreement_page", args=[project.slug])
    first = client.get(url).content.decode()
    assert '<strong id="percent-agreement">50%</strong>' in first and 'id="agreement-stale"' not in first

    queue.submit(labelled[0], second_reviewer, "db")  # sam now agrees on the first item
    reused = client.get(url).content.decode()
    fragment = client.get(reverse("progress_agreement", args=[project.slug]), HTTP_HX_REQUEST="true")
    assert '<strong id="percent-agreement">50%</strong>' in reused
    assert "Answers have changed since these figures were computed at " in reused
    assert "recomputed at most every 30 s." in reused and 'id="agreement-stale"' in fragment.content.decode()

    monkeypatch.setattr(agreement, "REUSE_SECONDS", 0)  # 30 s later
    current = client.get(url).content.decode()
    assert '<strong id="percent-agreement">100%</strong>' in current and 'id="agreement-stale"' not in current
    cache.clear()


def test_staff_see_adjudications_and_their_revisions_in_the_django_admin(client, project, project_admin,
                                                                          labelled, django_user_model) -> None:
    client.force_login(project_admin)
    client.post(reverse("adjudicate", args=[project.slug, labelled[0].pk]), {"choice": "dns"})
    staff = django_user_model.objects.create_superuser("root", password="a-long-password")
    client.force_login(staff)
    adjudication = Adjudication.objects.get()

    listing = client.get(reverse("admin:annotate_adjudication_changelist")).content.decode()
    change = client.get(reverse("admin:annotate_adjudication_change", args=[adjudication.pk]))

    assert f"adjudication:outages/{labelled[0].pk}/ada" in listing
    assert change.status_code == 200 and "Adjudication revisions" in change.content.decode()


def test_counts_on_the_agreement_pages_are_grouped_by_thousands(client, project, project_admin, reviewer,
                                                                second_reviewer) -> None:
    from annotate.models import Item, ItemStatus

    inputs = {"hypotheses": [{"id": "db", "text": "a"}, {"id": "dns", "text": "b"}]}
    items = Item.objects.bulk_create(Item(project=project, inputs=inputs, status=ItemStatus.DONE, final_answers=2,
                                          disagreement=True) for _ in range(1234))
    Answer.objects.bulk_create(Answer(item=item, project=project, reviewer=user, kind="target", target=target,
                                      source="s")
                               for item in items for user, target in ((reviewer, "db"), (second_reviewer, "dns")))
    client.force_login(project_admin)
    urls = _urls(project, items[0])

    page = client.get(urls["agreement"]).content.decode()
    assert "<td>rita · sam</td><td>1,234</td><td>0</td>" in page
    assert "<strong>1,234</strong>" in page  # disagreements open
    assert "Open (1,234)" in client.get(urls["list"]).content.decode()
    assert "1,234 open" in client.get(reverse("project_detail", args=[project.slug])).content.decode()


def test_agreement_page_ranks_each_reviewer_against_the_others_on_a_team(client, project, project_admin, labelled,
                                                                        django_user_model) -> None:
    """A third reviewer, tom, answers the second item too and disagrees with rita and sam there."""
    tom = django_user_model.objects.create_user("tom", password="a-long-password")
    Membership.objects.create(project=project, user=tom, role=Role.REVIEWER)
    Project.objects.filter(pk=project.pk).update(overlap=3)
    project.refresh_from_db()
    queue.apply_overlap(project)
    for item in labelled:
        assert queue.claim_next(project, tom) == item
        queue.submit(item, tom, "dns")
    client.force_login(project_admin)

    page = client.get(reverse("agreement_page", args=[project.slug])).content.decode()

    section = page[page.index('id="reviewer-agreement"'):page.index('id="pairs-title"')]
    names = [name for name in ("rita", "sam", "tom") if f">{name}</a>" in section]
    assert sorted(names, key=section.index) == ["rita", "tom", "sam"]  # 25% and 25% (in name order), then 50%
    items = reverse("item_list", args=[project.slug])
    assert f'href="{items}?reviewer=tom&amp;disagreement=yes"' in section
    assert "<td>2</td><td>4</td><td>1</td>" in section  # rita: 2 co-reviewers, 4 comparisons, 1 agreed


def test_agreement_page_of_two_reviewers_has_no_reviewer_table(client, project, project_admin, labelled) -> None:
    client.force_login(project_admin)

    page = client.get(reverse("agreement_page", args=[project.slug])).content.decode()

    assert 'id="reviewer-agreement"' not in page  # their one pair says it all


def test_agreement_chart_of_a_big_team_draws_the_pairs_agreeing_least(client, project, project_admin,
                                                                      monkeypatch) -> None:
    from annotate import agreement

    names = [f"r{n:02d}" for n in range(7)]  # 21 pairs
    pairs = [agreement.PairReport(reviewers=(a, b), items=4, agreed=0 if "r03" in (a, b) else 4)
             for i, a in enumerate(names) for b in names[i + 1:]]
    report = agreement.Report(measure="categorical", items=40, agreed=30, pairs=pairs)
    monkeypatch.setattr(agreement, "cached_project_report", lambda project: report)
    client.force_login(project_admin)

    page = client.get(reverse("agreement_page", args=[project.slug])).content.decode()

    start = page.index('<svg class="pair-chart"')
    chart = page[start:page.index("</svg>", start)]
    assert chart.count('class="fill"') == 12
    assert all(f"{a} · {b}" in chart for a, b in (p.reviewers for p in pairs) if "r03" in (a, b))  # all 6 at 0%
    assert "the 12 pairs agreeing least of 21" in page
    assert page.count("<tr><td>r0") == 21  # the table has them all
