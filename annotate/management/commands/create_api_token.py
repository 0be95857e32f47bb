"""`manage.py create_api_token USERNAME`: a JSON API token for a user, printed once."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from annotate.models import ApiToken, Project


class Command(BaseCommand):
    help = (
        "Create an API token for USERNAME and print its key (shown only now; only its hash is stored). The token "
        "reaches the user's projects, or only --project."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="What the token is for (shown in the admin).")
        parser.add_argument("--project", default=None, help="Limit the token to this project (slug).")

    def handle(self, *args, username: str, name: str, project: str | None, **options) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if not user.is_active:  # its key would answer 401 from the first request
            raise CommandError(f"{username}'s account is deactivated; reactivate it first")
        scope = None
        if project is not None:
            scope = Project.objects.filter(slug=project).first()
            if scope is None:
                raise CommandError(f"no project with slug {project!r}")
            if not scope.is_member(user):
                raise CommandError(f"{username} is not a member of {project!r}; add them first")
        _, key = ApiToken.objects.issue(user, name=name, project=scope)
        self.stdout.write(key)
