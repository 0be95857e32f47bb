"""The claim function (0009) first checks that the reviewer is still active and a member, holding their account's row.

A removal from the project (`Membership.delete`) or a deactivation (`accounts.deactivate`) that lands between a
request's membership check and its claim used to leave a claim made after they released the reviewer's claims:
the item stayed held until the lease ended. Both now lock the account's row first, and this function takes it
(KEY SHARE) before anything else, so a claim either waits for them and is refused, or is made first and then
released by them. Every claim the Python steps make takes the same step first (`queue._claiming`).
"""

import importlib

from django.db import migrations

PREVIOUS = importlib.import_module("annotate.migrations.0009_claim_next_rechecks_held_item")
PREVIOUS_SQL = PREVIOUS.FUNCTION_SQL  # reversing puts back the function as 0009 left it
replace = PREVIOUS.replace  # runs the SQL on PostgreSQL only

# 0009's function with one step first; the rest of it is unchanged.
_BEGIN = """    v_rejected bigint[] := '{}';
BEGIN
"""
_CHECK = """    v_rejected bigint[] := '{}';
    v_staff boolean;
BEGIN
    -- The reviewer may still be given items: active, and a member or staff (hotpath.lock_reviewer, which says
    -- why). The account's row stays locked (KEY SHARE) to the end: a removal or deactivation locks it first.
    SELECT u.is_staff INTO v_staff FROM auth_user u WHERE u.id = p_reviewer AND u.is_active FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF NOT v_staff AND NOT EXISTS (SELECT 1 FROM annotate_membership m
                                    WHERE m.project_id = p_project AND m.user_id = p_reviewer) THEN
        RETURN NULL;
    END IF;
"""
assert PREVIOUS_SQL.count(_BEGIN) == 1, "0009's function no longer reads as this migration expects"
FUNCTION_SQL = PREVIOUS_SQL.replace(_BEGIN, _CHECK)


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0017_accountsettings"),
    ]

    operations = [
        migrations.RunPython(replace(FUNCTION_SQL), replace(PREVIOUS_SQL)),
    ]
