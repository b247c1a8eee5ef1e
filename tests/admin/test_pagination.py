"""The admin's paginator on its own: exact up to its limit, then pages that go on for as
long as there are rows, without counting them."""

from __future__ import annotations

import pytest
from django.core.paginator import EmptyPage, PageNotAnInteger
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_sqlq.admin import BoundedCountPaginator
from django_sqlq.models import Job

pytestmark = pytest.mark.django_db


class SmallPaginator(BoundedCountPaginator):
    count_limit = 10


@pytest.fixture
def jobs() -> list[int]:
    Job.objects.bulk_create(Job(type="tests.echo", queue="default") for _ in range(30))
    return list(Job.objects.order_by("id").values_list("pk", flat=True))


def test_under_the_limit_it_counts_exactly(jobs: list[int]) -> None:
    paginator = SmallPaginator(Job.objects.filter(pk__in=jobs[:7]).order_by("id"), 4)
    assert (paginator.count, paginator.count_is_exact, paginator.num_pages) == (7, True, 2)
    assert [j.pk for j in paginator.page(2)] == jobs[4:7]


@pytest.mark.usefixtures("jobs")
def test_past_the_limit_it_counts_only_one_row_more() -> None:
    paginator = SmallPaginator(Job.objects.order_by("id"), 4)
    with CaptureQueriesContext(connection) as queries:
        assert (paginator.count, paginator.count_is_exact) == (11, False)
    assert len(queries) == 1
    assert "LIMIT 11" in queries[0]["sql"].upper()


def test_past_the_limit_pages_go_on_while_there_are_rows(jobs: list[int]) -> None:
    paginator = SmallPaginator(Job.objects.order_by("id"), 4)
    assert paginator.num_pages == 3  # what the limit alone shows
    assert [j.pk for j in paginator.page(5)] == jobs[16:20]
    assert paginator.num_pages == 6  # a page seen, and the next one known to exist
    last = paginator.page(8)
    assert [j.pk for j in last] == jobs[28:30]
    assert not last.has_next()
    with pytest.raises(EmptyPage):
        paginator.page(9)


@pytest.mark.parametrize(("number", "error"), [("x", PageNotAnInteger), (2.5, PageNotAnInteger),
                                               (0, EmptyPage)])  # fmt: skip
@pytest.mark.usefixtures("jobs")
def test_past_the_limit_a_bad_page_number_is_refused(
    number: object, error: type[Exception]
) -> None:
    paginator = SmallPaginator(Job.objects.order_by("id"), 4)
    with pytest.raises(error):
        paginator.page(number)
