"""reviews/paging.py: the one capped paginator of the queue, tickets and audit pages."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from refunds.models import Order
from reviews import paging
from tests.conftest import make_order


@pytest.fixture
def orders(db):
    for n in range(7):
        make_order(f"70{n}")
    return Order.objects.order_by("number")


def get(query: str = ""):
    return RequestFactory().get(f"/x/?{query}")


@pytest.mark.parametrize(
    ("raw", "number"), [("", 1), ("page=2", 2), ("page=0", 1), ("page=-3", 1), ("page=x", 1)]
)
def test_it_reads_the_page_number_and_takes_no_nonsense(raw, number):
    assert paging.page_number(get(raw)) == number


def test_it_slices_the_page_asked_for(orders):
    page = paging.capped_page(get("page=2"), orders, size=3, cap=100)
    assert [o.number for o in page] == ["703", "704", "705"]
    assert (page.number, page.paginator.num_pages, page.paginator.total) == (2, 3, 7)
    assert page.has_previous() and page.has_next()  # Django's own Page


def test_a_page_past_the_last_shows_the_last(orders):
    page = paging.capped_page(get("page=99"), orders, size=3, cap=100)
    assert page.number == 3 and [o.number for o in page] == ["706"]


def test_an_empty_list_has_one_empty_page(db):
    page = paging.capped_page(get(), Order.objects.order_by("pk"), size=3, cap=100)
    assert (list(page), page.number, page.paginator.num_pages, page.paginator.total) == (
        [],
        1,
        1,
        0,
    )


def test_it_counts_no_further_than_the_cap(orders):
    page = paging.capped_page(get("page=9"), orders, size=2, cap=4)
    # One over the cap says "more than 4"; the pages stop at the cap.
    assert (page.paginator.total, page.paginator.num_pages, page.number) == (5, 2, 2)
    with CaptureQueriesContext(connection) as seen:
        paging.capped_page(get(), orders, size=2, cap=4)
    count = next(q["sql"] for q in seen.captured_queries if "COUNT" in q["sql"].upper())
    assert "LIMIT 5" in count.upper()


def test_the_page_links_keep_the_filters_but_not_the_page(orders):
    page = paging.capped_page(get("q=ana&page=2&sort=amount"), orders, size=3, cap=100)
    assert paging.page_context(get("q=ana&page=2&sort=amount"), page) == {
        "total": 7,
        "count_cap": 100,
        "page": 2,
        "pages": 3,
        "query": "q=ana&sort=amount",
    }


def test_the_count_reads_the_key_alone_not_what_the_rows_annotate(orders):
    from django.db.models import Value
    from django.db.models.functions import Upper

    rows = orders.annotate(shout=Upper("number"), tag=Value("x")).values_list("number", "shout")
    with CaptureQueriesContext(connection) as seen:
        page = paging.capped_page(get(), rows, size=3, cap=100)
    (count,) = [q["sql"] for q in seen.captured_queries if "COUNT" in q["sql"].upper()]
    assert "UPPER" not in count.upper()
    assert [number for number, _ in page] == ["700", "701", "702"]
