"""The launch form (a project admin's choices for a new job) and the continue form."""

from __future__ import annotations

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.forms.models import model_to_dict

from annotate import versions
from annotate.forms import AGREED_ONLY_HELP, limit_size, offer_agreed_only
from trainingjobs import defaults, snapshot
from trainingjobs.models import TrainingJob

SETTINGS = (
    "base_version",
    "epochs",
    "lr",
    "optimizer",
    "held_out_fraction",
    "minibatch_size",
    "seed",
    "device",
    "checkpoint_interval",
)


def bounded(field, **kwargs):
    """The model field's form field, bounded by its validators as the model checks them: a PositiveIntegerField's
    own form field says at least 0 (in its message and to the browser), where a minibatch needs 1."""
    for validator in field.validators:
        if isinstance(validator, MinValueValidator):
            kwargs["min_value"] = max(kwargs.get("min_value", validator.limit_value), validator.limit_value)
        elif isinstance(validator, MaxValueValidator):
            kwargs["max_value"] = min(kwargs.get("max_value", validator.limit_value), validator.limit_value)
    return field.formfield(**kwargs)


class LaunchForm(forms.ModelForm):
    """Settings of a new job; initial values are the project tool kind's defaults (trainingjobs.defaults)."""

    reviewers = forms.CharField(
        required=False,
        help_text="Only answers by these reviewers (usernames, comma-separated); empty for everyone's.",
    )
    include_uploads = forms.BooleanField(
        required=False,
        help_text="Training data only, never held out; the job keeps its own copies of the files.",
    )
    agreed_only = forms.BooleanField(required=False, help_text=AGREED_ONLY_HELP)

    class Meta:
        model = TrainingJob
        fields = SETTINGS
        formfield_callback = bounded
        labels = {"lr": "Learning rate", "base_version": "Start from", "device": "Device"}
        widgets = {"lr": forms.NumberInput(attrs={"step": "any"}),
                   "held_out_fraction": forms.NumberInput(attrs={"step": "0.05"})}

    @staticmethod
    def settings_for(project) -> dict:
        """Each setting as a new job of `project` starts: the job's field defaults, the tool kind's, and the
        project's current model to start from (what the page shows, and what an API launch leaves unset gets)."""
        return (model_to_dict(TrainingJob(), fields=SETTINGS) | defaults.for_tool(project.tool)
                | {"base_version": project.current_version_id})

    def __init__(self, project, *args, **kwargs):
        super().__init__(*args, initial=self.settings_for(project) | kwargs.pop("initial", {}), **kwargs)
        self.project = project
        self.fields["base_version"].queryset = project.versions.all()
        self.fields["base_version"].empty_label = None
        self.upload_files, self.upload_records = snapshot.count_uploads(project)
        field = self.fields["include_uploads"]
        field.label = (f"Also train on the accepted experience uploads: {_counted(self.upload_files, 'file')} "
                       f"({_counted(self.upload_records, 'supervision record')})")
        field.disabled = not self.upload_files
        offer_agreed_only(self.fields["agreed_only"], project)

    def filters(self) -> dict:
        names = [name.strip() for name in self.cleaned_data.get("reviewers", "").split(",") if name.strip()]
        return ({"reviewers": names} if names else {}) | (
            {"agreed_only": True} if self.cleaned_data.get("agreed_only") else {})

    def settings(self) -> dict:
        return {name: self.cleaned_data[name] for name in SETTINGS if name != "base_version"}


class ContinueForm(forms.Form):
    extra_epochs = forms.IntegerField(min_value=1, max_value=10_000, initial=10, label="More epochs")


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class ModelUploadForm(forms.Form):
    """The two files `save_pretrained` writes, to become a model version of the project."""

    manifest = forms.FileField(
        label="tool.json", widget=forms.ClearableFileInput(attrs={"accept": ".json,application/json"}),
    )
    weights = forms.FileField(
        label="model.safetensors", widget=forms.ClearableFileInput(attrs={"accept": ".safetensors"}),
    )
    label = forms.CharField(
        max_length=200, required=False, label="Name",
        help_text="A name for the version, e.g. where it was trained (default: the upload's number).",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        limit_size(self.fields["manifest"], versions.MAX_MANIFEST_BYTES)
        limit_size(self.fields["weights"], versions.max_model_bytes())
