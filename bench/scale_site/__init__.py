"""The site as `bench/team_scale.py` serves it: production settings plus timing and a baseline view.

Only the benchmark uses this package (`DJANGO_SETTINGS_MODULE=scale_site.settings` with `bench/` on the path),
so the baseline URL and the timing header exist nowhere else.
"""
