"""The claim function (0018) reads the project's overlap itself, after the reviewer's membership check.

It took the overlap as an argument, which the request had read with the project before it claimed: an overlap
lowered in between (on the settings page or in Django's admin) still gave a place the new overlap no longer
had. The Python steps read it again at the same point (`hotpath.lock_reviewer`). The argument goes: a function
of the same name with the old arguments would stay beside this one, so the old one is dropped first.
"""

import importlib

from django.db import migrations

PREVIOUS = importlib.import_module("annotate.migrations.0018_claim_checks_reviewer_still_member")
PREVIOUS_SQL = PREVIOUS.FUNCTION_SQL  # reversing puts back the function as 0018 left it
replace = PREVIOUS.replace  # runs the SQL on PostgreSQL only

OLD_SIGNATURE = "annotate_claim_next(bigint, integer, text, text[], integer, timestamptz, timestamptz, integer)"
NEW_SIGNATURE = "annotate_claim_next(bigint, integer, text, text[], timestamptz, timestamptz, integer)"

_STEPS = [
    # The argument becomes a variable.
    ("p_project bigint, p_reviewer integer, p_ready text, p_final text[], p_overlap integer,",
     "p_project bigint, p_reviewer integer, p_ready text, p_final text[],"),
    ("    v_staff boolean;\n", "    v_staff boolean;\n    v_overlap integer;\n"),
    # Read once the reviewer may claim: a statement of its own, it sees an overlap committed since the request.
    ("""        RETURN NULL;
    END IF;
    SELECT c.item_id INTO v_item""",
     """        RETURN NULL;
    END IF;
    -- The overlap as it is now, not as the request read it (an admin may have lowered it since).
    SELECT p.overlap INTO v_overlap FROM annotate_project p WHERE p.id = p_project;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    SELECT c.item_id INTO v_item"""),
]


def _rewritten(sql: str) -> str:
    for old, new in _STEPS:
        assert sql.count(old) == 1, "0018's function no longer reads as this migration expects"
        sql = sql.replace(old, new)
    return sql.replace("p_overlap", "v_overlap")


FUNCTION_SQL = _rewritten(PREVIOUS_SQL)


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0022_overlap_help"),
    ]

    operations = [
        migrations.RunPython(replace(f"DROP FUNCTION IF EXISTS {OLD_SIGNATURE};\n{FUNCTION_SQL}"),
                             replace(f"DROP FUNCTION IF EXISTS {NEW_SIGNATURE};\n{PREVIOUS_SQL}")),
    ]
