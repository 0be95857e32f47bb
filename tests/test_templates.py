"""Template hygiene that rendering tests would only catch page by page."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_template_comment_spans_two_lines() -> None:
    """Django's `{# ... #}` ends with its line: one spread over two lines is shown on the page as text (it was,
    above the item page's progress line). Longer notes go in `{% comment %}`."""
    open_ended = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for start in (m.start() for m in re.finditer(r"\{#", line)):
                if "#}" not in line[start:]:
                    open_ended.append(f"{path.relative_to(ROOT)}:{number}")
    assert not open_ended, f"a {{# comment must close on its own line: {', '.join(open_ended)}"


def test_every_page_title_names_the_site() -> None:
    """A browser tab or history entry reads "<page> · <project> · tensorcode annotate" on every page (the training
    pages once ended at the project's name)."""
    unnamed = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        for title in re.findall(r"\{% block title %\}(.*?)\{% endblock %\}", path.read_text(encoding="utf-8")):
            if not title.endswith("tensorcode annotate"):
                unnamed.append(f"{path.relative_to(ROOT)}: {title}")
    assert not unnamed, f"page titles that do not end with the site's name: {unnamed}"
