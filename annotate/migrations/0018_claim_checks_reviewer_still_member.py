"""The claim function (0009) first checks that the reviewer is still active and a member, holding their account's row.

A removal from the project (`Membership.delete`) or a deactivation (`accounts.deactivate`) that lands between a
request's membership check and its claim used to leave a claim made after they released the reviewer's claims:
the item stayed held until the lease ended. Both now lock the account's row first, and this function takes it
(KEY SHARE) before anything else, so a claim either waits for them and is refused, or is made first and then
released by them. `queue._claim_next_in_python` takes the same step (`hotpath.lock_reviewer`).
"""

import importlib

from django.db import migrations

FUNCTION_SQL = """
CREATE OR REPLACE FUNCTION annotate_claim_next(
    p_project bigint, p_reviewer integer, p_ready text, p_final text[], p_overlap integer,
    p_now timestamptz, p_expires timestamptz, p_attempts integer
) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_item bigint;
    v_final integer;
    v_taken integer;
    v_rejected bigint[] := '{}';
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
    SELECT c.item_id INTO v_item
      FROM annotate_claim c JOIN annotate_item i ON i.id = c.item_id
     WHERE c.reviewer_id = p_reviewer AND i.project_id = p_project AND i.status = p_ready AND c.expires_at > p_now
       AND NOT EXISTS (SELECT 1 FROM annotate_answer a WHERE a.item_id = c.item_id AND a.reviewer_id = p_reviewer
                       AND a.kind = ANY (p_final))
     ORDER BY c.created_at LIMIT 1;
    IF v_item IS NOT NULL THEN
        -- Its lock may have waited on a deletion of the project or on the item's last answer: gone or no longer
        -- ready, it is passed over like any taken item, and the queue is searched instead.
        PERFORM 1 FROM annotate_item WHERE id = v_item AND status = p_ready FOR UPDATE;
        IF NOT FOUND THEN
            v_item := NULL;
        END IF;
    END IF;
    IF v_item IS NULL THEN
        FOR attempt IN 1 .. p_attempts LOOP
            IF p_overlap = 1 THEN
                SELECT i.id, i.final_answers INTO v_item, v_final FROM annotate_item i
                 WHERE i.project_id = p_project AND i.status = p_ready
                   AND NOT EXISTS (SELECT 1 FROM annotate_answer a WHERE a.item_id = i.id AND a.reviewer_id = p_reviewer
                                   AND a.kind = ANY (p_final))
                   AND NOT EXISTS (SELECT 1 FROM annotate_claim c WHERE c.item_id = i.id AND c.expires_at > p_now)
                   AND i.id <> ALL (v_rejected)
                 ORDER BY i.confidence ASC NULLS LAST, i.created_at, i.id LIMIT 1
                   FOR UPDATE OF i SKIP LOCKED;
            ELSE
                SELECT i.id, i.final_answers INTO v_item, v_final FROM annotate_item i
                 WHERE i.project_id = p_project AND i.status = p_ready
                   AND NOT EXISTS (SELECT 1 FROM annotate_answer a WHERE a.item_id = i.id AND a.reviewer_id = p_reviewer
                                   AND a.kind = ANY (p_final))
                   AND (SELECT count(*) FROM annotate_claim c WHERE c.item_id = i.id AND c.expires_at > p_now)
                       < p_overlap - i.final_answers
                   AND i.id <> ALL (v_rejected)
                 ORDER BY i.confidence ASC NULLS LAST, i.created_at, i.id LIMIT 1
                   FOR UPDATE OF i SKIP LOCKED;
            END IF;
            IF v_item IS NULL THEN
                RETURN NULL;
            END IF;
            -- The filter ran before the lock: count again now that no one else can change this item.
            SELECT count(*) INTO v_taken FROM annotate_claim c
             WHERE c.item_id = v_item AND c.expires_at > p_now AND c.reviewer_id <> p_reviewer;
            EXIT WHEN NOT EXISTS (SELECT 1 FROM annotate_answer a WHERE a.item_id = v_item
                                  AND a.reviewer_id = p_reviewer AND a.kind = ANY (p_final))
                  AND p_overlap - v_final - v_taken > 0;
            v_rejected := v_rejected || v_item;
            v_item := NULL;
        END LOOP;
        IF v_item IS NULL THEN
            RETURN NULL;
        END IF;
    END IF;
    INSERT INTO annotate_claim (item_id, reviewer_id, expires_at, created_at)
    VALUES (v_item, p_reviewer, p_expires, p_now)
    ON CONFLICT (item_id, reviewer_id) DO UPDATE SET expires_at = EXCLUDED.expires_at;
    UPDATE annotate_item SET claimed_by_id = p_reviewer, claim_expires_at = p_expires WHERE id = v_item;
    RETURN v_item;
END
$$;
"""

# Reversing puts back the function as 0009 left it.
PREVIOUS_SQL = importlib.import_module("annotate.migrations.0009_claim_next_rechecks_held_item").FUNCTION_SQL


def replace(sql):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)
    return run


class Migration(migrations.Migration):
    dependencies = [
        ("annotate", "0017_accountsettings"),
    ]

    operations = [
        migrations.RunPython(replace(FUNCTION_SQL), replace(PREVIOUS_SQL)),
    ]
