"""Forms of the reviewer pages, and the one function that turns a target editor's POST into a target.

A target is checked twice: here for its form (a number is a number, a choice is one of the offered ids), and
by the tool's own validator in `annotate.queue` (exactly as its trainer checks it) before anything is stored.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models.functions import Lower
from django.forms.models import model_to_dict
from django.template.defaultfilters import pluralize, truncatechars
from django.utils import timezone
from django.utils.text import get_text_list

from annotate import accounts, export, imports, tooling
from annotate.middleware import zone_names
from annotate.models import ExportFormat, Project, Role
from annotate.unsent import ADMIN_FORMS, CLAIM_FORMS
from annotate.views import display


def tool_mode_choices() -> list[tuple[str, str]]:
    return [
        (f"{tool}/{mode}", f"{tool.capitalize()} · {mode}")
        for tool, modes in tooling.TOOL_MODES.items()
        for mode in modes
    ]


class SettingsMerge:
    """A project's settings form merged with what another admin saved since it was shown (the site's settings page
    and Django's admin both): the form carries a digest of each setting it showed (`loaded`, a hidden field each
    form declares), and only the settings this admin changed are written, so two admins changing different
    settings both keep theirs. A setting both changed, to different values, is a conflict."""

    SETTINGS = ("name", "guidelines", "configuration", "overlap", "lease_seconds")
    SETTING_WORDS = {"name": "the name", "guidelines": "the guidelines", "configuration": "the tool configuration",
                     "overlap": "the overlap", "lease_seconds": "the lease"}

    def clean_guidelines(self) -> str:
        # Browsers send a textarea's lines with CR LF: stored as typed, untouched guidelines would count as changed.
        return self.cleaned_data["guidelines"].replace("\r\n", "\n")

    def show_settings(self, project: Project) -> None:
        """Note what the form shows of `project`'s settings."""
        self.initial["loaded"] = json.dumps(_digests(_settings_of(project)))

    def merge(self, stored: Project, mine: dict[str, Any]) -> tuple[list[str], list[str]] | None:
        """The settings this admin changed and those to keep from another admin, against `stored` (the project
        as it is now, locked by the caller); None when they conflict, with an error beside each such setting
        saying what it holds now, the form counting as shown from now on: saving again stores this admin's."""
        theirs = _settings_of(stored)
        ours, now = _digests(mine), _digests(theirs)
        shown = {**now, **self._shown()}  # a setting the form has no record of: overwritten, as it used to be
        changed = [f for f in self.SETTINGS if ours[f] != shown[f]]
        conflicts = [f for f in changed if now[f] not in (shown[f], ours[f])]
        kept = [f for f in self.SETTINGS if f not in changed and now[f] != shown[f]]
        if conflicts:
            self._conflict(conflicts, theirs, now, kept)
            return None
        return changed, kept

    def kept_words(self, kept: list[str]) -> str:
        words = get_text_list([self.SETTING_WORDS[f] for f in kept], "and")
        return f"Kept what another admin saved meanwhile: {words}."

    def _shown(self) -> dict:
        try:
            shown = json.loads(self.cleaned_data.get("loaded") or "{}")
        except ValueError:
            return {}
        if not isinstance(shown, dict):
            return {}
        return {name: digest for name, digest in shown.items() if name in self.SETTINGS and isinstance(digest, str)}

    def _conflict(self, fields: list[str], theirs: dict, stored: dict, kept: list[str]) -> None:
        """`kept`: settings only the other admin changed. The form shows their values from now on: it counts as
        shown from now, so a value left as it was would read as this admin's change and undo theirs."""
        for name in fields:
            value = theirs[name]
            now = json.dumps(value, indent=1) if name == "configuration" else str(value)
            now = f"“{truncatechars(now, 300)}”" if now else "nothing"
            self.add_error(name, f"Another admin changed this since you opened the page; it now holds {now}. "
                                 f"Save again to replace it with yours.")
        self.add_error(None, "Nothing was saved: another admin saved these settings since you opened the page. "
                             "Your changes are still in the form." + (f" It now shows what they saved of "
                             f"{get_text_list([self.SETTING_WORDS[f] for f in kept], 'and')}." if kept else ""))
        self.data = self.data.copy()
        self.data["loaded"] = json.dumps(stored)
        for name in kept:
            value = theirs[name]
            self.data[name] = json.dumps(value, indent=1) if name == "configuration" else str(value)


class ProjectForm(SettingsMerge, forms.ModelForm):
    """Create or configure a project: its tool kind and mode, configuration, guidelines and queue policy."""

    kind = forms.ChoiceField(label="Tool and mode", choices=tool_mode_choices)
    configuration = forms.CharField(
        label="Tool configuration (JSON)",
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text='Fields of the tool\'s configuration, for example {"dim": 32, "seed": 0}. Empty: defaults.',
    )

    # What the form showed of each setting (a digest per field), to merge with what another admin saved since.
    loaded = forms.CharField(required=False, widget=forms.HiddenInput)

    field_order = ["name", "slug", "kind", "configuration", "guidelines", "overlap", "lease_seconds"]

    class Meta:
        model = Project
        fields = ["name", "slug", "guidelines", "overlap", "lease_seconds"]
        widgets = {"guidelines": forms.Textarea(attrs={"rows": 6})}
        help_texts = {"guidelines": "Markdown: **bold**, *italic*, lists (- or 1.), [links](https://...), "
                                    "# headings and | tables |. HTML is shown as text."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kind = self.fields["kind"]
        kind.choices = tool_mode_choices()
        if self.instance.pk:
            # The tool and mode bind the items already imported; they are fixed once the project exists.
            kind.disabled = True
            kind.initial = f"{self.instance.tool}/{self.instance.mode}"
            self.fields["slug"].disabled = True
            self.initial["configuration"] = json.dumps(self.instance.configuration or {}, indent=1)
            self.show_settings(self.instance)
        kind.widget.attrs["aria-describedby"] = "kind-help"

    def clean_configuration(self) -> dict:
        text = (self.cleaned_data.get("configuration") or "").strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}.") from exc
        except RecursionError as exc:
            raise ValidationError("Not valid JSON: nested too deeply.") from exc
        if not isinstance(value, dict):
            raise ValidationError("The configuration is a JSON object, like {\"dim\": 32}.")
        return value

    def clean(self) -> dict:
        data = super().clean()
        tool, _, mode = (data.get("kind") or "").partition("/")
        if self.instance.pk:
            tool, mode = self.instance.tool, self.instance.mode
        data["tool"], data["mode"] = tool, mode
        # The model's own clean() checks the tool, the mode and the configuration; it runs after this, on the
        # instance (a configuration that is not a JSON object has its error already, and leaves the one stored).
        self.instance.tool, self.instance.mode = tool, mode
        if "configuration" in data:
            self.instance.configuration = data["configuration"]
        return data

    def add_error(self, field, error) -> None:
        """The model's own check names its "mode" field, which this form shows as "kind": file it there, unless
        "kind" already says what is wrong (a choice that is not offered)."""
        if field is None and isinstance(error, ValidationError) and "mode" in getattr(error, "error_dict", {}):
            mode = error.error_dict.pop("mode")
            if "kind" not in self.errors:
                error.error_dict.setdefault("kind", []).extend(mode)
            if not error.error_dict:
                return
        super().add_error(field, error)

    def save(self, commit: bool = True) -> Project:
        project = super().save(commit=False)
        project.tool = self.cleaned_data["tool"]
        project.mode = self.cleaned_data["mode"]
        project.configuration = self.cleaned_data.get("configuration") or {}
        if commit:
            project.save()
        return project

    def save_settings(self) -> tuple[Project, str] | None:
        """Store a valid form's settings of an existing project, merged with what another admin saved since this
        form was shown (`SettingsMerge`). Returns the project and what was kept from another admin, in words (or
        an empty string); None on a conflict, with nothing stored."""
        mine = _settings_of(self.instance)  # the form's values: validation put them on the instance
        with transaction.atomic():
            # NO KEY UPDATE, the lock the UPDATE below takes anyway: FOR UPDATE would also wait for (and hold up) every
            # answer and claim being written, whose foreign key holds the project's row (KEY SHARE).
            project = Project.objects.select_for_update(no_key=True).get(pk=self.instance.pk)
            merged = self.merge(project, mine)
            if merged is None:
                return None
            changed, kept = merged
            # Each setting is checked alone (the overlap against the answers stored, the configuration against
            # the tool), so another admin's, checked when saved, and this admin's go together.
            for name in changed:
                setattr(project, name, mine[name])
            project.save(update_fields=list(self.SETTINGS))
        return project, self.kept_words(kept) if kept else ""


def _settings_of(project: Project) -> dict[str, Any]:
    return model_to_dict(project, fields=ProjectForm.SETTINGS)


def _digests(settings: dict[str, Any]) -> dict[str, str]:
    """A short digest of each setting's value, for the form to say what it showed without repeating it."""
    return {name: hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
            for name, value in settings.items()}


class MemberForm(forms.Form):
    """One or several users to add (or whose role to change): a team of 20 is pasted at once, not typed 20 times.

    `cleaned_data["username"]` is the list of existing users, in the order given, and `cleaned_data["new_names"]`
    the names that have no account yet: allowed only when whoever adds them may create accounts and asked to
    (`create`); otherwise an unknown name adds nobody.
    """

    MAX_NAMES = 500

    username = forms.CharField(
        label="Usernames", max_length=20_000,
        widget=forms.Textarea(attrs={"rows": 2, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One or several, separated by commas, spaces or new lines; each gets the role chosen.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.REVIEWER)
    create = forms.BooleanField(
        label="Create accounts for names that have none", required=False,
        help_text="Each new account gets a link, shown once, with which its owner sets a password. A name that is "
                  "an email address is also the account's address (links are mailed there when the site sends "
                  "email).")

    def __init__(self, *args, may_create: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        if not may_create:
            del self.fields["create"]

    def clean_username(self):
        names = list(dict.fromkeys(re.split(r"[\s,;]+", self.cleaned_data["username"].strip())))
        names = [name for name in names if name]
        if not names:
            raise ValidationError("Give at least one username.")
        if len(names) > self.MAX_NAMES:
            raise ValidationError(f"{len(names):,} usernames at once; give at most {self.MAX_NAMES}.")
        return names

    def clean(self):
        cleaned = super().clean()
        names = cleaned.get("username")
        if not names:
            return cleaned
        model = get_user_model()
        existing = {user.get_username(): user for user in model.objects.filter(username__in=names)}
        inactive = [name for name in names if name in existing and not existing[name].is_active]
        if inactive:
            self.add_error("username", f"{_listed(inactive)}: deactivated; nobody was added.")
            return cleaned
        missing = [name for name in names if name not in existing]
        # Usernames are case-sensitive: "Reviewer" would be created beside "reviewer", one person with two accounts.
        same = dict(model.objects.annotate(folded=Lower(model.USERNAME_FIELD))
                    .filter(folded__in={name.lower() for name in missing})
                    .values_list("folded", model.USERNAME_FIELD))
        near = [f"{name!r} (did you mean {same[name.lower()]!r}?)" for name in missing if name.lower() in same]
        if near:
            self.add_error("username", f"No user named {', '.join(near[:10])}; nobody was added.")
            return cleaned
        if missing and not cleaned.get("create"):
            hint = " Tick \u201cCreate accounts\u201d to create them." if "create" in self.fields else (
                " Ask a site administrator to create their accounts.")
            self.add_error("username", f"No user named {_listed(missing)}; nobody was added.{hint}")
            return cleaned
        invalid = [name for name in missing if not _valid_username(model, name)]
        if invalid:
            self.add_error("username", f"Not a possible username: {_listed(invalid)} (at most 150 letters, digits "
                                       f"and @ . + - _); nobody was added.")
            return cleaned
        cleaned["username"] = [existing[name] for name in names if name in existing]
        cleaned["new_names"] = missing
        return cleaned


def _listed(names: list[str]) -> str:
    return ", ".join(repr(name) for name in names[:10]) + (" ..." if len(names) > 10 else "")


def _valid_username(model, name: str) -> bool:
    """The username field's own validators: its characters and its max_length."""
    try:
        model._meta.get_field(model.USERNAME_FIELD).run_validators(name)
    except ValidationError:
        return False
    return True


class _LimitedSignIn:
    """Django's sign-in, refusing a name that failed too often from this address (`annotate.accounts`)."""

    def clean(self):
        username = self.cleaned_data.get("username") or ""
        address = self.request.META.get("REMOTE_ADDR", "") if self.request else ""
        wait = accounts.signin_wait(username, address)
        if wait:
            minutes = math.ceil(wait / 60)
            raise ValidationError(
                f"Too many failed sign-ins as {username} from here: try again in {minutes} minute{pluralize(minutes)}, "
                f"or ask your project's admin for a set-password link.", code="too_many_failures")
        try:
            cleaned = super().clean()
        except ValidationError:
            accounts.signin_failed(username, address)
            raise
        accounts.signin_succeeded(username, address)
        return cleaned


class SignInForm(_LimitedSignIn, AuthenticationForm):
    """The site's sign-in page."""


class AdminSignInForm(_LimitedSignIn, AdminAuthenticationForm):
    """Django admin's sign-in page, limited the same way."""


class TimeZoneForm(forms.Form):
    """The time zone a user's pages use on every browser; empty follows each browser's own."""

    time_zone = forms.ChoiceField(
        label="Show times in", required=False, error_messages={"invalid_choice": "No time zone is named %(value)s."},
        help_text="Times on the pages (leases, answers, jobs, the progress charts' days) read in it.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["time_zone"].choices = [("", "Follow this browser")] + [(z, z) for z in zone_names()]


class ForgottenForm(forms.Form):
    """Whose password to reset, by username or email address (shown only when the site sends email)."""

    name = forms.CharField(label="Username or email address", max_length=254,
                           widget=forms.TextInput(attrs={"autocomplete": "username", "autofocus": True}))


class EmailForm(forms.Form):
    """The address a user's set-password links are mailed to; empty removes it.

    The current password is asked for, as for a new password: an address decides where a password can be reset,
    so a browser someone left signed in must not be enough to take the account over.
    """

    email = forms.EmailField(
        label="Email address", required=False, max_length=254, widget=forms.EmailInput(attrs={"autocomplete": "email"}),
        help_text="Where a set-password link is mailed: one you ask for on the sign-in page if you forget your "
                  "password, or one an admin makes for you. Empty, links come only from an admin.")
    password = forms.CharField(label="Your password", strip=False,
                               widget=forms.PasswordInput(attrs={"autocomplete": "current-password"}))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user

    def clean_password(self):
        password = self.cleaned_data["password"]
        if not self.user.check_password(password):
            raise ValidationError("That is not your password; the address is unchanged.")
        return password


class ProjectDeleteForm(forms.Form):
    """Deleting is for good: the admin types the project's slug, as GitHub asks for a repository's name."""

    confirm = forms.CharField(label="Type the project's slug to confirm", max_length=100, strip=True)

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        self.fields["confirm"].widget.attrs.update(autocomplete="off", spellcheck="false")

    def clean_confirm(self):
        typed = self.cleaned_data["confirm"]
        if typed != self.project.slug:
            raise ValidationError(f"That is not {self.project.slug!r}; nothing was deleted.")
        return typed


class VersionForm(forms.Form):
    version = forms.ModelChoiceField(queryset=None, label="Model version that predicts", empty_label=None)

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["version"].queryset = project.versions.all()
        if project.current_version_id:
            self.initial.setdefault("version", project.current_version_id)


class ImportForm(forms.Form):
    file = forms.FileField(
        label="JSONL file of tool inputs",
        help_text='One JSON object per line: {"inputs": ...}, the inputs of one item.',
        widget=forms.ClearableFileInput(attrs={"accept": ".jsonl,.json,.txt,application/json"}),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        limit_size(self.fields["file"], imports.max_upload_bytes())


class ExperienceUploadForm(forms.Form):
    experience = forms.FileField(
        label="Experience file traced by your own program",
        help_text="Saved by tensorcode with this project's tool; checked with the library's safe loader.",
        widget=forms.ClearableFileInput(attrs={"accept": ".json,application/json"}),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        limit_size(self.fields["experience"], imports.max_experience_bytes())


def limit_size(field: forms.FileField, limit: int) -> None:
    """Let the browser refuse a file over `limit` bytes before sending it (`static/keyboard.js`). The server
    refuses it too, unread (`annotate.middleware.BodyLimit`), but a browser still sending a body the server
    will not read may show a reset connection instead of the reason."""
    field.widget.attrs["data-max-bytes"] = limit
    size = f"{limit // 2**20} MiB" if limit % 2**20 == 0 else f"{limit / 2**20:.1f} MiB"
    field.help_text = f"{field.help_text} At most {size}.".strip()


AGREED_ONLY_HELP = ("Their reviewers gave different targets, and training on both teaches the model neither. "
                    "Adjudicated items stay, with the admin's target.")


def offer_agreed_only(field: forms.BooleanField, project: Project) -> None:
    """Label the box of the `agreed_only` filter with what it leaves out now; disabled when that is nothing."""
    items, answers = export.open_disagreements(project)
    field.label = (f"Leave out the {items:,} item{pluralize(items)} whose reviewers disagree and that no admin has "
                   f"adjudicated ({answers:,} answer{pluralize(answers)})")
    field.disabled = not items


class ExportForm(forms.Form):
    format = forms.ChoiceField(choices=ExportFormat.choices, initial=ExportFormat.EXPERIENCE)
    minibatch_size = forms.IntegerField(min_value=1, max_value=10_000, initial=32, label="Minibatch size")
    reviewer = forms.ModelChoiceField(queryset=None, required=False, empty_label="Every reviewer")
    since = forms.DateField(
        required=False, label="Answered on or after", widget=forms.DateInput(attrs={"type": "date"})
    )
    until = forms.DateField(
        required=False, label="Answered on or before", widget=forms.DateInput(attrs={"type": "date"})
    )
    confidence_min = forms.FloatField(required=False, min_value=0, max_value=1, label="Min. confidence",
                                      widget=forms.NumberInput(attrs={"step": "any", "placeholder": "0"}))
    confidence_max = forms.FloatField(required=False, min_value=0, max_value=1, label="Max. confidence",
                                      widget=forms.NumberInput(attrs={"step": "any", "placeholder": "1"}))
    agreed_only = forms.BooleanField(required=False, help_text=AGREED_ONLY_HELP)

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["reviewer"].queryset = project.answered_by().order_by("username")
        offer_agreed_only(self.fields["agreed_only"], project)

    def clean(self) -> dict:
        """Ranges that select nothing are refused beside the field that closes them, with the values kept."""
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", f"This is before the first day, {since:%Y-%m-%d}: no answer can match.")
        low, high = data.get("confidence_min"), data.get("confidence_max")
        if low is not None and high is not None and low > high:
            self.add_error("confidence_max", f"This is below the minimum, {low:g}: no item can match.")
        return data

    def filters(self) -> dict:
        data = self.cleaned_data
        found: dict[str, Any] = {}
        if data.get("reviewer"):
            found["reviewers"] = [data["reviewer"].get_username()]
        # Days start at the admin's midnight (their browser's time zone), as the site's times read; the last
        # day is taken whole, up to the midnight that ends it.
        zone = timezone.get_current_timezone()
        if data.get("since"):
            found["after"] = datetime.combine(data["since"], time.min, tzinfo=zone).isoformat()
        if data.get("until"):
            found["before"] = datetime.combine(data["until"] + timedelta(days=1), time.min, tzinfo=zone).isoformat()
        for key in ("confidence_min", "confidence_max"):
            if data.get(key) is not None:
                found[key] = data[key]
        if data.get("agreed_only"):
            found["agreed_only"] = True
        return found


class SkipForm(forms.Form):
    reason = forms.CharField(max_length=500, strip=True, error_messages={"required": "Give a reason to skip."})


TYPED_FORMS = CLAIM_FORMS + ADMIN_FORMS  # the item's forms whose unsent typing the server keeps (`annotate.unsent`)
TYPED_MAX_CHARS = 256 * 1024
TYPED_MAX_FIELDS = 1000


class TypedForm(forms.Form):
    """What a user typed into an item's forms and has not sent, as `static/drafts.js` sends it: a JSON object
    `{"answer": [field, ...], "skip": [...]}` (or an admin's `"adjudication"` or `"inputs"`), each field
    `{"index": n, "name": "...", "value": "..."}` or, for a box or a radio button, `{"index": n, "name": "...",
    "checked": true}`. Kept as sent, so it is checked here for shape and size only: the answer itself is
    validated when it is submitted."""

    typed = forms.CharField(strip=False, max_length=TYPED_MAX_CHARS, error_messages={
        "max_length": f"What you typed is too large to keep on the server (over {TYPED_MAX_CHARS // 1024} KiB); "
                      "this browser still keeps it."})

    def clean_typed(self) -> dict:
        try:
            typed = json.loads(self.cleaned_data["typed"])
        except ValueError as exc:
            raise ValidationError(f"typed: not JSON ({exc})") from None
        if not isinstance(typed, dict):
            raise ValidationError("typed: a JSON object of forms, such as {\"answer\": [...]}")
        unknown = sorted(set(typed) - set(TYPED_FORMS))
        if unknown:
            raise ValidationError(f"typed: unknown form {unknown[0]!r}; the forms kept are {', '.join(TYPED_FORMS)}")
        for form, fields in typed.items():
            if not isinstance(fields, list) or len(fields) > TYPED_MAX_FIELDS:
                raise ValidationError(f"typed.{form}: a list of at most {TYPED_MAX_FIELDS} fields")
            for k, field in enumerate(fields):
                if not _typed_field(field):
                    raise ValidationError(f"typed.{form}[{k}]: a field is {{\"index\": n, \"name\": \"...\"}} with "
                                          "a text \"value\" or a true/false \"checked\"")
        return typed


def _typed_field(field) -> bool:
    if not isinstance(field, dict) or set(field) not in ({"index", "name", "value"}, {"index", "name", "checked"}):
        return False
    index, name = field["index"], field["name"]
    if type(index) is not int or index < 0 or not isinstance(name, str) or not name:
        return False
    return isinstance(field["value"], str) if "value" in field else isinstance(field["checked"], bool)


def parse_target(mode: str, data, inputs: Any, receipt: dict | None) -> Any:
    """The target a target editor's POST describes, in the spec's form; `ValidationError` says what is missing."""
    editor = display.editor_name(mode)
    if editor == "choice":
        options = display.choices(inputs, receipt)
        if data.get("split"):
            shares = [_number(data.get(f"share-{i}"), f"share of {_option(o)}", default=0.0)
                      for i, o in enumerate(options)]
            if any(s < 0 for s in shares):
                raise ValidationError("Shares cannot be negative.")
            total = sum(shares)
            if total <= 0:
                raise ValidationError("Give at least one candidate a positive share.")
            return [s / total for s in shares]
        choice = data.get("choice")
        if not choice:
            raise ValidationError("Choose a candidate (keys 1-9), or split between candidates.")
        if choice not in {o["id"] for o in options}:
            raise ValidationError(f"{choice!r} is not one of this item's candidates.")
        return choice
    if editor == "nli":
        label = data.get("label")
        if label not in {name for name, _ in display.NLI_LABELS}:
            raise ValidationError("Choose entailment (e), neutral (n) or contradiction (c).")
        return label
    if editor == "relevance":
        queries = len(inputs.get("queries") or []) if isinstance(inputs, dict) else 0
        documents = len(inputs.get("documents") or []) if isinstance(inputs, dict) else 0
        mask = [[False] * documents for _ in range(queries)]
        for value in data.getlist("relevant"):
            q, _, d = str(value).partition(":")
            if q.isdigit() and d.isdigit() and int(q) < queries and int(d) < documents:
                mask[int(q)][int(d)] = True
        missing = [str(q + 1) for q, row in enumerate(mask) if not any(row)]
        if missing:
            raise ValidationError(
                f"Mark at least one relevant document for query {', '.join(missing)}: every query needs one."
            )
        return mask
    if editor == "outcome":
        options = display.choices(inputs, receipt)
        if data.get("scope") == "all":
            return [_number(data.get(f"outcome-{i}"), f"outcome of {_option(o)}")
                    for i, o in enumerate(options)]
        plan = data.get("plan")
        if not plan:
            raise ValidationError("Choose the plan you observed (keys 1-9), or enter every plan's outcome (a).")
        if plan not in {o["id"] for o in options}:
            raise ValidationError(f"{plan!r} is not one of this item's plans.")
        return {"candidate_id": plan, "outcome": _number(data.get("outcome"), "observed outcome")}
    text = data.get("text")
    if text is None:
        raise ValidationError("Write the reviewed text.")
    return text.replace("\r\n", "\n")


def _option(option: dict) -> str:
    """An option as a message names it: its text ends in a full stop of its own, which the message adds."""
    return (option["text"] or option["id"]).rstrip(".")


def _number(value: Any, what: str, default: float | None = None) -> float:
    if value in (None, ""):
        if default is not None:
            return default
        raise ValidationError(f"Enter the {what}.")
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"The {what} must be a number, got {value!r}.") from exc
    if not math.isfinite(number):
        raise ValidationError(f"The {what} must be a finite number.")
    return number
