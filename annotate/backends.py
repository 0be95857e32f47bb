"""The site's authentication backend: Django's, reading the signed-in user's own settings in the same query."""

from __future__ import annotations

from django.contrib.auth import backends, get_user_model


class ModelBackend(backends.ModelBackend):
    """Django's `ModelBackend`, but the user comes with their `AccountSettings` (the time zone every page needs)
    in one query rather than two."""

    def get_user(self, user_id):
        model = get_user_model()
        try:
            user = model._default_manager.select_related("account_settings").get(pk=user_id)
        except model.DoesNotExist:
            return None
        return user if self.user_can_authenticate(user) else None
