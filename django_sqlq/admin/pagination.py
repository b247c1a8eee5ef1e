"""The lists on a table of millions of rows: a paginator that never counts the whole table,
and the change lists that read only what a list shows."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import EmptyPage, Page, PageNotAnInteger, Paginator
from django.db.models import QuerySet
from django.db.models.functions import Left
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.translation import gettext

from django_sqlq import dashboard
from django_sqlq.admin.display import ERROR_LINE_CHARS

if TYPE_CHECKING:
    AnyPaginator = Paginator[Any]
else:
    AnyPaginator = Paginator


class BoundedCountPaginator(AnyPaginator):
    """Counts at most ``count_limit + 1`` rows (a ``COUNT`` over a ``LIMIT``-ed subquery).

    Up to the limit it is Django's paginator, exact. Past it the list says "more than
    10,000" and pages go on for as long as there are rows: each page reads one row more
    than it shows to know whether another page follows.
    """

    count_limit = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._pages_seen = 0

    @cached_property
    def count(self) -> int:
        return dashboard.bounded_count(self.object_list, self.count_limit)

    @property
    def count_is_exact(self) -> bool:
        return self.count <= self.count_limit

    @property  # type: ignore[override]
    def num_pages(self) -> int:
        if self.count_is_exact:
            if self.count == 0 and not self.allow_empty_first_page:
                return 0
            return math.ceil(max(1, self.count - self.orphans) / self.per_page)
        return max(math.ceil(self.count_limit / self.per_page), self._pages_seen)

    def validate_number(self, number: Any) -> int:
        if self.count_is_exact:
            return int(super().validate_number(number))
        try:
            if isinstance(number, float) and not number.is_integer():
                raise ValueError
            number = int(number)
        except (TypeError, ValueError):
            raise PageNotAnInteger(gettext("That page number is not an integer")) from None
        if number < 1:
            raise EmptyPage(gettext("That page number is less than 1"))
        return int(number)

    def page(self, number: Any) -> Page[Any]:
        if self.count_is_exact:
            return super().page(number)
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        rows = list(self.object_list[bottom : bottom + self.per_page + 1])
        if not rows and number > 1:
            raise EmptyPage(gettext("That page contains no results"))
        more = len(rows) > self.per_page
        self._pages_seen = max(self._pages_seen, number + 1 if more else number)
        return Page(rows[: self.per_page], number, self)


class NulSafeChangeList(ChangeList):
    """A filter value holding a NUL character (``?status=%00``) is an invalid lookup, as
    Django treats other invalid ones (a redirect to ``?e=1``): no row can hold one, and
    PostgreSQL refuses the query with a DataError (a 500)."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        if any("\x00" in value for _, values in request.GET.lists() for value in values):
            raise IncorrectLookupParameters("A NUL character in the query string.")
        queryset: QuerySet[Any] = super().get_queryset(request, exclude_parameters)
        return queryset


class JobChangeList(NulSafeChangeList):
    """Lists read only the head of ``last_error``, and not the JSON columns."""

    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Any]:
        queryset: QuerySet[Any] = super().get_queryset(request, exclude_parameters)
        lean: QuerySet[Any] = queryset.defer("payload", "result", "errors", "last_error")
        annotated: QuerySet[Any] = lean.annotate(error_head=Left("last_error", ERROR_LINE_CHARS))
        return annotated
