"""Django admin for every model of the reviewer app (staff only)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import model_ngettext
from django.contrib.auth import admin as auth_admin
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpResponseRedirect, QueryDict
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from annotate import accounts, deletion, imports, queue, versions
from annotate.forms import SettingsMerge
from annotate.models import (
    Adjudication,
    AdjudicationRevision,
    Answer,
    AnswerRevision,
    ApiToken,
    Claim,
    DemoSeed,
    ExperienceUpload,
    Export,
    Item,
    ItemDeletion,
    ItemImport,
    Membership,
    ModelUpload,
    ModelVersion,
    Prediction,
    Project,
)


class DeletedThroughService:
    """Admin deletion through the app's own service (`delete_one`, by default `deletion.delete_record`), as the
    site's pages delete: the rows that hang off the object and its files go too, and work still using it refuses
    it (`refusal`). The confirmation page counts the rows per kind, where Django's listed each one, and names
    that work (`blockers`) instead of offering Delete. Of several selected, one refused meanwhile is a message
    and the rest still go."""

    delete_one: Callable = staticmethod(deletion.delete_record)
    refusal: type[Exception] = deletion.InUse

    def blockers(self, obj) -> list[str]:
        return obj.in_use()

    def get_deleted_objects(self, objs, request):
        return _confirmation(request, self.model._base_manager.filter(pk__in=[obj.pk for obj in objs]),
                             [f"{obj}: {reason}" for obj in objs for reason in self.blockers(obj)])

    def delete_model(self, request, obj) -> None:
        try:
            self.delete_one(obj)
        except self.refusal as exc:
            self.message_user(request, str(exc), messages.ERROR)
            request.deletion_refused = True

    def response_delete(self, request, obj_display, obj_id):
        """Back to the object, not "deleted successfully", when work began using it after the confirmation."""
        if getattr(request, "deletion_refused", False):
            opts = self.model._meta
            return HttpResponseRedirect(reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj_id]))
        return super().response_delete(request, obj_display, obj_id)

    def delete_queryset(self, request, queryset) -> None:
        deleted = refused = 0
        for obj in queryset:
            try:
                self.delete_one(obj)
                deleted += 1
            except self.refusal as exc:
                refused += 1
                self.message_user(request, str(exc), messages.ERROR)
        request.deletion_counts = (deleted, refused)

    def message_user(self, request, message, level=messages.INFO, *args, **kwargs) -> None:
        """Django's Delete action then says every selected object was deleted: where some were refused meanwhile,
        it says how many went instead."""
        deleted, refused = getattr(request, "deletion_counts", (0, 0))
        if level == messages.SUCCESS and refused:
            message = (f"Deleted {deleted} {model_ngettext(self.opts, deleted)}; {refused} could not be deleted "
                       "(see why above).")
            level = messages.WARNING
        super().message_user(request, message, level, *args, **kwargs)


def _confirmation(request, rows: QuerySet, protected: list[str]):
    """What `get_deleted_objects` gives Django's delete confirmation for `rows` and what cascades from them: a
    count per kind of row (Django's collector loaded and listed each one), the kinds the user may not delete, and
    `protected`, the work that keeps them."""
    counted = {model: count for model, count in deletion.rows_summary(rows).items() if count}
    return [deletion.counted(counted)], {deletion.name(model): count for model, count in counted.items()}, \
        _perms_needed(request, counted), protected


def _perms_needed(request, models) -> set[str]:
    return {str(model._meta.verbose_name) for model in models
            if not request.user.has_perm(f"{model._meta.app_label}.delete_{model._meta.model_name}")}


class NotAddedHere:
    """Rows the site's own paths make, with the checks, files and history that go with them: listed, shown and
    (where the class allows) changed or deleted here, never added."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False


class Shown(NotAddedHere):
    """A record of what the site did (an export, an upload and its check, a training job): every field shown,
    none changed here, where a changed state or setting would describe work that never ran. Deleted (where the
    class allows) through `DeletedThroughService`."""

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class ViewOnly(Shown):
    """Shown, never added, changed or deleted here: the site's own paths keep what these rows feed (an item's
    count of answers, its status and disagreement, an answer's history) in step with them."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class MembershipForm(forms.ModelForm):
    """A membership's project and user are fixed once it exists: changing them would move the member's claims
    to someone else (or another project) without releasing them. Remove it and add another instead."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            for name in ("project", "user"):
                if name in self.fields:
                    self.fields[name].disabled = True


class ProjectAdminForm(SettingsMerge, forms.ModelForm):
    """Django admin's project form, merged as the site's settings page merges (`SettingsMerge`): it wrote every
    field as the page showed it, so saving put back another admin's older guidelines or overlap."""

    loaded = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.show_settings(self.instance)

    def clean(self) -> dict:
        """Against the project as it is now, locked until the admin's save commits (Django's admin posts a change in
        one transaction): the settings this admin changed (`changed_settings`, all the save writes), and those
        another admin saved meanwhile kept in the data."""
        data = super().clean()
        self.changed_settings = self.kept_settings = None
        if self.instance.pk is None or any(name not in data for name in self.SETTINGS):
            return data
        rows = Project.objects
        if transaction.get_connection().in_atomic_block:
            rows = rows.select_for_update(no_key=True)  # the lock the save's UPDATE takes anyway; see forms.py
        stored = rows.filter(pk=self.instance.pk).first()
        if stored is None:  # deleted since the page read it
            self.add_error(None, "This project was deleted meanwhile: nothing was saved.")
            return data
        merged = self.merge(stored, {name: data[name] for name in self.SETTINGS})
        if merged is not None:
            self.changed_settings, self.kept_settings = merged
            for name in self.kept_settings:
                data[name] = getattr(stored, name)
        return data


class MembershipInline(admin.TabularInline):
    """The members on the project's change page, up to `most` of them; a bigger team is managed on the members'
    list (`ProjectAdmin.members`), which searches and pages: inline, 327 members made a page of 24,000 px that took
    3.6 s to load and as long to save."""

    model = Membership
    form = MembershipForm
    extra = 0
    most = 50
    autocomplete_fields = ["user"]
    readonly_fields = ["created_at"]  # when they joined: history, not a setting


@admin.register(Project)
class ProjectAdmin(DeletedThroughService, admin.ModelAdmin):
    """Deleting goes through `annotate.deletion`, as the site's Delete project does: Django's own cascade listed
    every row on the confirmation page and failed past 65,535 parameters (a project of about 30,000 items)."""

    list_display = ["slug", "name", "tool", "mode", "overlap", "current_version", "created_at"]
    list_filter = ["tool", "mode"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    raw_id_fields = ["current_version", "created_by"]
    inlines = [MembershipInline]
    form = ProjectAdminForm

    def get_deleted_objects(self, objs, request):
        """A count per kind of row instead of a line per row; unfinished work shows as what protects it."""
        lines, counts, perms_needed, protected = [], {"projects": 0}, set(), []
        for project in objs:
            rows = {model: count for model, count in deletion.summary(project).items() if count}
            lines.append(f"{project}: {deletion.counted(rows)}")
            counts["projects"] += 1
            for model, count in rows.items():
                counts[deletion.name(model)] = counts.get(deletion.name(model), 0) + count
            perms_needed |= _perms_needed(request, rows)
            protected += [f"{project}: {reason}" for reason in deletion.blockers(project)]
        return lines, counts, perms_needed, protected

    delete_one = staticmethod(deletion.delete_project)
    refusal = deletion.ProjectBusy

    def get_readonly_fields(self, request, obj=None):
        """As on the site's settings page: the tool and mode are fixed once the project exists, since its items'
        inputs, predictions and model versions are all the tool's; so is the slug, which its pages' addresses,
        its API calls and every answer's provenance (`review:<slug>/...`) name. Only the settings are changed
        here: the current model is switched on the settings page, which retries the items an earlier version
        refused (a value here, shown before a training job promoted another, would have put the old one back),
        and the rest is the project's history."""
        if obj is None:
            return []
        return ["slug", "tool", "mode", "model_version", "members", "created_by", "created_at",
                "predictions_resent_at"]

    @staticmethod
    def _member_count(obj) -> int:
        """Counted once per page: the inlines and the Members line both ask."""
        if not hasattr(obj, "_member_count"):
            obj._member_count = obj.memberships.count()
        return obj._member_count

    def get_inlines(self, request, obj):
        if obj is not None and self._member_count(obj) > MembershipInline.most:
            return []
        return self.inlines

    @admin.display(description="Members")
    def members(self, obj) -> str:
        """How many, and a link to them on the members' list, which pages and searches a big team."""
        count = self._member_count(obj)
        url = reverse("admin:annotate_membership_changelist") + f"?project__id__exact={obj.pk}"
        if count <= MembershipInline.most:
            return format_html('{} (listed below; also <a href="{}">on the members\' list</a>)', count, url)
        return format_html('{}: too many to list here; manage them <a href="{}">on the members\' list</a>',
                           count, url)

    def get_exclude(self, request, obj=None):
        # A new project gets a fresh model of its own (`save_model`): offered a version, it could take another's.
        return ["current_version"] if obj is not None else ["current_version", "predictions_resent_at"]

    @admin.display(description="Current model version")
    def model_version(self, obj) -> str:
        url = reverse("project_settings", args=[obj.slug]) + "#version-title"
        return format_html('{} (<a href="{}">switch it on the project\'s settings page</a>)',
                           obj.current_version or "none", url)

    def get_prepopulated_fields(self, request, obj=None):
        return self.prepopulated_fields if obj is None else {}

    def save_model(self, request, obj, form, change) -> None:
        """As the site's settings page does: only the settings this admin changed are written (`ProjectAdminForm`),
        and a changed overlap finishes or reopens the items it concerns.

        The overlap once the admin's transaction has committed: applying it waits for the submits in flight, which
        must not wait in turn for the locks this transaction holds (its rows, its memberships).
        """
        if not change:  # as the site's New project does: a fresh, untrained model predicts until one is trained
            obj.created_by = obj.created_by or request.user
            super().save_model(request, obj, form, change)
            obj.current_version = ModelVersion.objects.allocate(obj, label="untrained", trained=False)
            obj.save(update_fields=["current_version"])
            return
        obj.save(update_fields=form.changed_settings)  # the rest as stored: another admin's kept
        if form.kept_settings:
            self.message_user(request, form.kept_words(form.kept_settings), messages.WARNING)
        if "overlap" in form.changed_settings:
            transaction.on_commit(functools.partial(queue.apply_overlap, obj))


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    form = MembershipForm
    list_display = ["project", "user", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__slug"]
    raw_id_fields = ["project", "user"]
    readonly_fields = ["created_at"]

    def get_changeform_initial_data(self, request) -> dict:
        """Added from the members' list of one project (where a big team's project page links): that project."""
        initial = super().get_changeform_initial_data(request)
        shown = QueryDict(request.GET.get("_changelist_filters", ""))
        if shown.get("project__id__exact", "").isdigit():
            initial.setdefault("project", shown["project__id__exact"])
        return initial

    def delete_queryset(self, request, queryset) -> None:
        """One by one (`Membership.delete`), as the site's Remove does: each member's claims in the project go back
        to its queue. A bulk delete of the rows would leave those items held until their leases ended."""
        for membership in queryset.select_related("project", "user"):
            membership.delete()


@admin.register(ModelVersion)
class ModelVersionAdmin(DeletedThroughService, NotAddedHere, admin.ModelAdmin):
    """Versions come with their files, from a new project, a training job or an uploaded model: a row added here
    would have none (and no folder of its own to hold them). Deleting one removes its folder (disk an old
    version held), never the project's current model or one a training job still uses."""

    list_display = ["id", "project", "label", "tool", "mode", "trained", "directory", "created_at"]
    list_filter = ["trained", "tool"]
    search_fields = ["label", "project__slug"]
    raw_id_fields = ["project", "parent", "created_by_job"]

    def get_readonly_fields(self, request, obj=None):
        """Only the label is edited here: the rest describes the files the version was saved with."""
        return [field.name for field in ModelVersion._meta.fields if field.name != "label" and not field.primary_key]


class ItemAdminForm(forms.ModelForm):
    def clean(self) -> dict:
        """An item added here is checked as an import checks each line: inputs the tool would refuse were kept
        (`"garbage"`, ready for review with no prediction)."""
        data = super().clean()
        project = data.get("project")
        if self.instance.pk is None and project is not None and "inputs" in data:
            try:
                data["inputs"] = imports.validate_record(project, {"inputs": data["inputs"]})
            except ValueError as exc:
                self.add_error("inputs", str(exc))
        return data


@admin.register(Item)
class ItemAdmin(admin.ModelAdmin):
    list_display = ["id", "project", "status", "confidence", "final_answers", "disagreement", "claimed_by",
                    "claim_expires_at"]
    list_filter = ["status", "disagreement", "project"]
    form = ItemAdminForm
    list_select_related = ["project", "claimed_by"]
    raw_id_fields = ["project", "prediction", "claimed_by"]
    show_full_result_count = False

    def get_readonly_fields(self, request, obj=None):
        """An item stays in its project: its answers, claims, predictions and sources all name that project. Its
        inputs are what was predicted and answered; its count of final answers (the overlap reads it) and who
        holds it (its claims' mirror) are the queue's, kept with its answers and claims."""
        if obj is None:  # added: waits for its first prediction, as an imported item does
            return ["status", "prediction", "confidence", "final_answers", "claimed_by", "claim_expires_at",
                    "disagreement", "created_at"]
        # Its prediction and confidence are its model's: a prediction of another project's item was accepted, and
        # a confidence of 7. Its status stays editable, a repair by hand.
        return ["project", "inputs", "prediction", "confidence", "final_answers", "claimed_by", "claim_expires_at"]

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if not change:  # predicted by the project's model, as an imported item is
            from annotate import tasks

            tasks.enqueue_predictions(obj.project, [obj.pk])

    def get_deleted_objects(self, objs, request):
        """A count per kind of row, as the site's delete page shows, instead of a line per row: Django's collector
        loaded every answer and prediction of the selected items to list them. Unfinished work in their projects
        shows as what protects them."""
        items = _selected(objs)
        return _confirmation(request, items, [f"{project}: {reason}" for project in _projects_of(items)
                                              for reason in deletion.blockers(project)])

    def delete_model(self, request, obj) -> None:
        self.delete_queryset(request, Item.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset) -> None:
        """Each project's selected items through `deletion.delete_matching`, set-based in locked batches, as the
        site's delete page deletes them; a project whose work blocks it is a message, and the others' items go."""
        for project in _projects_of(queryset):
            ids = list(queryset.filter(project=project).values_list("pk", flat=True))
            try:
                deletion.delete_matching(project, lambda items, ids=ids: items.filter(
                    pk__in=deletion.by_pks(Item, ids).values("pk")), through=max(ids), expected=len(ids))
            except (deletion.ProjectBusy, deletion.CountChanged) as exc:
                self.message_user(request, f"{project}: nothing more was deleted: {exc}", messages.ERROR)


def _selected(objs) -> QuerySet:
    """The admin's selection as a queryset of items (the delete view passes a list of one)."""
    if isinstance(objs, QuerySet):
        return objs.order_by()
    return Item.objects.filter(pk__in=[obj.pk for obj in objs])


def _projects_of(items: QuerySet) -> QuerySet:
    return Project.objects.filter(pk__in=items.order_by().values("project")).order_by("pk")


@admin.register(Claim)
class ClaimAdmin(NotAddedHere, admin.ModelAdmin):
    """The queue gives claims, never more on an item than its overlap leaves places for: shown here, and deleted
    to free a place at once, never added or changed."""

    list_display = ["id", "item", "reviewer", "expires_at", "created_at"]
    raw_id_fields = ["item", "reviewer"]
    show_full_result_count = False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def delete_model(self, request, obj) -> None:
        queue.release(obj.item, obj.reviewer)  # as the reviewer's Release does: the item's "claimed by" follows

    def delete_queryset(self, request, queryset) -> None:
        for claim in queryset.select_related("item", "reviewer"):
            queue.release(claim.item, claim.reviewer)


@admin.register(Prediction)
class PredictionAdmin(ViewOnly, admin.ModelAdmin):
    """Made by a model version for an item: the item's queue order and status follow its confidence, which a
    change here would leave behind. They go with their item, project or a re-prediction."""

    list_display = ["id", "item", "model_version", "confidence", "created_at"]
    raw_id_fields = ["item", "model_version"]
    show_full_result_count = False


class AnswerRevisionInline(admin.TabularInline):
    model = AnswerRevision
    extra = 0
    can_delete = False
    readonly_fields = ["kind", "target", "skip_reason", "note", "created_at"]


@admin.register(Answer)
class AnswerAdmin(ViewOnly, admin.ModelAdmin):
    """Reviewers answer and edit on the site (`annotate.queue` checks the target, keeps every revision and counts
    the item's answers); project admins settle disagreements there too. Answers go with their item or project."""

    list_display = ["id", "item", "reviewer", "kind", "source", "updated_at"]
    list_filter = ["kind"]
    search_fields = ["source", "reviewer__username"]
    raw_id_fields = ["item", "reviewer"]
    inlines = [AnswerRevisionInline]
    show_full_result_count = False


@admin.register(AnswerRevision)
class AnswerRevisionAdmin(ViewOnly, admin.ModelAdmin):
    list_display = ["id", "answer", "kind", "note", "created_at"]
    raw_id_fields = ["answer"]
    show_full_result_count = False


@admin.register(ApiToken)
class ApiTokenAdmin(NotAddedHere, admin.ModelAdmin):
    """Tokens are issued by `manage.py create_api_token`, which shows the key once: a row added here had no key
    (and a second one broke the unique key hash). Revoked here, one by one or with the list's action."""

    list_display = ["prefix", "name", "user", "project", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "user__username", "prefix"]
    raw_id_fields = ["user", "project"]
    actions = ["revoke"]

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset) -> None:
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {revoked} token{pluralize(revoked)}: requests with "
                                   f"{'them' if revoked != 1 else 'it'} now get 401.")

    def get_readonly_fields(self, request, obj=None):
        """Whose the token is and which project it reaches are fixed once made (the key was handed to that user
        for that scope); its name and revocation are edited."""
        fixed = ["prefix", "key_hash", "created_at", "last_used_at"]
        return fixed if obj is None else ["user", "project", *fixed]


@admin.register(Export)
class ExportAdmin(DeletedThroughService, Shown, admin.ModelAdmin):
    """Exports are made on the project page, which queues them; deleting one removes its files, never while a
    worker writes them."""

    list_display = ["id", "project", "format", "state", "done", "total", "created_at", "finished_at"]
    list_filter = ["state", "format"]
    raw_id_fields = ["project", "requested_by"]


@admin.register(ExperienceUpload)
class ExperienceUploadAdmin(DeletedThroughService, Shown, admin.ModelAdmin):
    """Deleting goes through `imports.remove_upload`, as the project page's Remove does: the file goes too, and
    an upload a waiting or running training job froze cannot be deleted."""

    list_display = ["id", "project", "original_name", "state", "size", "uploaded_by", "created_at"]
    list_filter = ["state"]
    raw_id_fields = ["project", "uploaded_by"]

    def blockers(self, obj) -> list[str]:
        return [f"training job {pk} froze it and is not over (cancel it, or let it finish)"
                for pk in imports.unfinished_jobs_with(obj)]

    delete_one = staticmethod(imports.remove_upload)
    refusal = imports.UploadInUse


@admin.register(ModelUpload)
class ModelUploadAdmin(DeletedThroughService, Shown, admin.ModelAdmin):
    """A record of each uploaded model and its check; uploads are made on the training page, never here.
    Deleting one goes through `versions.remove_upload`, as the training page's Remove: the version stays."""

    list_display = ["id", "project", "label", "state", "version", "size", "uploaded_by", "created_at"]
    list_filter = ["state"]
    raw_id_fields = ["project", "uploaded_by", "version"]

    delete_one = staticmethod(versions.remove_upload)
    refusal = versions.UploadBeingChecked


@admin.register(ItemImport)
class ItemImportAdmin(DeletedThroughService, Shown, admin.ModelAdmin):
    """A record of each uploaded items file and how its import went; imports are made on the project page.
    The items it created stay when the record is deleted; one being imported is not deleted."""

    list_display = ["id", "project", "original_name", "state", "count", "problem_total", "size", "uploaded_by",
                    "created_at"]
    list_filter = ["state"]
    raw_id_fields = ["project", "uploaded_by"]


class AdjudicationRevisionInline(admin.TabularInline):
    model = AdjudicationRevision
    extra = 0
    can_delete = False
    readonly_fields = ["kind", "target", "chosen_answer", "adjudicator", "note", "created_at"]


@admin.register(Adjudication)
class AdjudicationAdmin(NotAddedHere, admin.ModelAdmin):
    """Read-mostly: adjudicate on the site (`annotate.adjudication` checks the target and keeps revisions)."""

    list_display = ["id", "item", "kind", "adjudicator", "source", "updated_at"]
    list_filter = ["kind"]
    search_fields = ["source", "adjudicator__username"]
    raw_id_fields = ["item", "chosen_answer", "adjudicator"]
    readonly_fields = ["item", "kind", "target", "chosen_answer", "adjudicator", "source", "created_at", "updated_at"]
    inlines = [AdjudicationRevisionInline]
    show_full_result_count = False


@admin.register(DemoSeed)
class DemoSeedAdmin(admin.ModelAdmin):
    """Demo projects `manage.py demo` created; deleting a row here lets it create that project again."""

    list_display = ["slug", "created_at"]


@admin.register(ItemDeletion)
class ItemDeletionAdmin(DeletedThroughService, Shown, admin.ModelAdmin):
    """Deletions of items queued from the delete page or the API, which count the items first; a worker does them
    (`tasks.delete_matching_items`) and the deletion's page stops one."""

    list_display = ["id", "project", "state", "total", "deleted_items", "requested_by", "created_at", "finished_at"]
    list_filter = ["state"]
    raw_id_fields = ["project", "requested_by"]
    show_full_result_count = False


class UserAdmin(auth_admin.UserAdmin):
    """Django's, but unticking "Active" is `accounts.deactivate`, as the members list's Deactivate: the items the
    user held go back to their queues at once instead of when their leases end. The site's account rules hold here
    too (`accounts.may_switch`): a superuser's account is changed only by a superuser, who alone makes one, and
    nobody deactivates their own."""

    def has_change_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False  # shown, not changed; its password page refuses too
        return super().has_change_permission(request, obj)

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields += ["is_superuser", "user_permissions", "groups"]
        if obj is not None and obj.pk == request.user.pk:
            fields.append("is_active")
        return fields

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and "is_active" in form.changed_data and not obj.is_active:
            held = accounts.deactivate(obj)
            if held:
                self.message_user(request, f"The {held} item{'s' if held != 1 else ''} {obj.get_username()} was "
                                           "labelling went back to the queue.")


admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), UserAdmin)
