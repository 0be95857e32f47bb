"""A project's guidelines as HTML: Markdown, so admins can write lists, emphasis, links and tables.

CommonMark with tables and strikethrough (markdown-it-py). Raw HTML in the text is shown as text, and links with
scripting schemes (`javascript:` and the like) are not made links, so guidelines cannot run code in a reviewer's
page. A single line break stays a line break, as guidelines written before Markdown expect. Links open in a new
tab, so following one never leaves the item being answered; headings start at `h3`, under the page's own.
"""

from __future__ import annotations

from functools import lru_cache

from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

# Rendering takes a fraction of a millisecond, but the item page shows the guidelines on every item: each
# distinct text is rendered once per process. Longer texts are rendered each time rather than kept.
CACHED_UP_TO = 100_000


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable(["table", "strikethrough"])

    def link_open(renderer, tokens, idx, options, env):
        tokens[idx].attrSet("target", "_blank")
        tokens[idx].attrSet("rel", "noopener noreferrer")
        return renderer.renderToken(tokens, idx, options, env)

    def headings_under_the_page(state) -> None:
        for token in state.tokens:
            if token.type in ("heading_open", "heading_close"):
                token.tag = f"h{min(int(token.tag[1]) + 2, 6)}"

    md.add_render_rule("link_open", link_open)
    md.core.ruler.push("headings_under_the_page", headings_under_the_page)
    return md


_MARKDOWN = _parser()


def to_html(text: str) -> SafeString:
    """The guidelines `text` (Markdown) as safe HTML."""
    if len(text) <= CACHED_UP_TO:
        return _cached(text)
    return mark_safe(_MARKDOWN.render(text))  # noqa: S308 - markdown-it escapes raw HTML (html=False)


@lru_cache(maxsize=128)
def _cached(text: str) -> SafeString:
    return mark_safe(_MARKDOWN.render(text))  # noqa: S308 - as above
