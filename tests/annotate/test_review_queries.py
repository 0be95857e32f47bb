"""How many queries the review loop costs: a fixed budget per request that does not grow with the project.

The loop (claim the next item, show it, submit it and get the next one) is what every reviewer does all day;
issue 11 measured 38 queries per submit before the role lookup was cached and claims became one upsert. These
are query counts, not timings: raise a budget only with a reason.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotate import hotpath
from tests.annotate.conftest import make_ready_items

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}
# Counted with sessions in the database (no TC_CACHE_URL); with a shared cache the session read is one fewer.
# On PostgreSQL the claim is one call of a database function; elsewhere a transaction of seven statements, which
# the test's own transaction turns into a savepoint and its release (two more).
CLAIM = 1 if hotpath.claims_in_database() else 9
CLAIM_NEXT_BUDGET = 4 + CLAIM  # session, user, project with role, the claim, the item as the item page reads it
ITEM_PAGE_BUDGET = 3  # session, user, item with project, role, prediction, claim, answer and "previous"
# The answer's transaction (on PostgreSQL with the overlap's lock, `hotpath.hold_overlap`), then claim-next and the
# next item as its page reads it.
SUBMIT_BUDGET = 17 + CLAIM + (1 if connection.vendor == "postgresql" else 0)


def _claim(client, project) -> str:
    response = client.post(reverse("review_next", args=[project.slug]), **HX)
    assert response.status_code == 200
    return response["HX-Push-Url"]


def _submit(client, url: str) -> str:
    response = client.post(url + "submit/", {"choice": "db"}, **HX)
    assert response.status_code == 200, response.content[:300]
    assert response["HX-Push-Url"] != url
    return response["HX-Push-Url"]


def test_claim_next_stays_within_its_query_budget(client, project, reviewer, django_assert_max_num_queries):
    make_ready_items(project, [0.1, 0.2, 0.3])
    client.force_login(reviewer)

    with django_assert_max_num_queries(CLAIM_NEXT_BUDGET):
        _claim(client, project)


def test_item_page_stays_within_its_query_budget(client, project, reviewer, django_assert_max_num_queries):
    make_ready_items(project, [0.1, 0.2])
    client.force_login(reviewer)
    url = _claim(client, project)

    with django_assert_max_num_queries(ITEM_PAGE_BUDGET):
        assert client.get(url).status_code == 200


def test_submit_with_the_next_item_stays_within_its_query_budget(client, project, reviewer,
                                                                 django_assert_max_num_queries):
    make_ready_items(project, [0.1, 0.2, 0.3])
    client.force_login(reviewer)
    url = _claim(client, project)

    with django_assert_max_num_queries(SUBMIT_BUDGET):
        _submit(client, url)


def test_submit_queries_do_not_grow_with_answers_or_items(client, project, reviewer):
    """The tenth submit costs what the second does, with more items waiting: no query per row anywhere."""
    make_ready_items(project, [k / 40 for k in range(40)])
    client.force_login(reviewer)
    url = _submit(client, _claim(client, project))
    counts = []
    for _ in range(9):
        with CaptureQueriesContext(connection) as queries:
            url = _submit(client, url)
        counts.append(len(queries))

    assert len(set(counts)) == 1, counts
