"""`{% page_url "jobs" 2 %}`: a page's address, the address's other parameters kept (`annotate/_pager.html`,
`annotate/_table_pager.html`)."""

from __future__ import annotations

from django import template

register = template.Library()


@register.simple_tag(takes_context=True)
def page_url(context, param: str, number: int) -> str:
    """The current address with `param` set to `number`, the other lists' pages (and any filter) kept.

    Django's `{% querystring %}` takes the parameter's name as written in the template, not from a variable."""
    query = context["request"].GET.copy()
    query[param] = number
    return f"?{query.urlencode()}"
