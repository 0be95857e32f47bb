"""Model versions brought in from outside: the two files of a tool saved with `save_pretrained`, uploaded; and
taken out, as one archive of those two files (`archive`), to train further offline.

This closes the offline loop: export experience files, train on them with the library anywhere, and bring the
result back as a model version to compare and promote. The web process never imports torch, so it checks only
what it reads cheaply (the sizes; that `tool.json` is a tool manifest naming the project's tool) and stores the
files. A worker then loads them strictly against the project's tool and mode (`check`), as
`manage.py register_model_version` does, and registers the version or records why not. The upload's own files
are removed either way: an accepted tool is saved afresh into its version's directory.
"""

from __future__ import annotations

import os
import shutil
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from annotate import storage
from annotate.imports import ImportRejected, loads, read_limited
from annotate.models import ModelUpload, ModelVersion, Project, UploadState

MANIFEST = "tool.json"
WEIGHTS = "model.safetensors"
MAX_MANIFEST_BYTES = 1024 * 1024  # the library's own limit for tool.json (`tensorcode.tools`)


class UploadRefused(ValueError):
    """The files were not kept; the message says which file and why."""


class UploadBeingChecked(ValueError):
    """A worker is checking the upload; it can be removed once accepted or refused."""


class NoFiles(ValueError):
    """The version has no files to download; the message says why."""


CHUNK = 1024 * 1024  # what a download holds in memory at a time


def archive(version: ModelVersion) -> Iterator[bytes]:
    """`tool.json` and `model.safetensors` of `version` as a zip archive, made while it is sent: nothing is written
    to disk, and memory holds a chunk at a time however large the weights (stored, not compressed: weights hardly
    compress). Both files are opened here, so a missing one raises `NoFiles` before anything is sent, and a
    version deleted meanwhile still sends the files it opened."""
    files = []
    try:
        for name in (MANIFEST, WEIGHTS):
            source = (version.path / name).open("rb")
            files.append((_entry(name, os.fstat(source.fileno()).st_mtime), source))
    except OSError:
        for _, source in files:
            source.close()
        named = f"Version {version.pk}" + (f" ({version.label})" if version.label else "")
        raise NoFiles(f"{named} has no files to download yet: " + (
            "its files are missing from the artifact storage" if version.trained else
            "an untrained version's fresh tool is made the first time a worker predicts with it")) from None
    return _zipped(files)


def archive_name(version: ModelVersion) -> str:
    """What a downloaded archive is called: `<project slug>-version-<id>.zip`."""
    return f"{version.project.slug}-version-{version.pk}.zip"


def _entry(name: str, mtime: float) -> zipfile.ZipInfo:
    """The file's name and time, readable by everyone once unzipped (the artifact files' own mode may be 0600)."""
    entry = zipfile.ZipInfo(name, date_time=time.localtime(max(mtime, 315532800))[:6])  # zip's dates start in 1980
    entry.external_attr = 0o644 << 16
    return entry


def _zipped(files: list) -> Iterator[bytes]:
    sink = _Sink()
    try:
        with zipfile.ZipFile(sink, "w", zipfile.ZIP_STORED) as zipped:
            for entry, source in files:
                with zipped.open(entry, "w", force_zip64=True) as target:
                    while chunk := source.read(CHUNK):
                        target.write(chunk)
                        yield sink.take()
        yield sink.take()
    finally:
        for _, source in files:
            source.close()


class _Sink:
    """A write-only file for `zipfile` that hands over what was written since the last `take`."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


def max_model_bytes() -> int:
    """The weights file's upload limit in bytes (`TC_MODEL_MAX_BYTES`, default 512 MiB)."""
    return int(getattr(settings, "TC_MODEL_MAX_BYTES", 512 * 1024 * 1024))


MAX_LABEL = 200  # ModelUpload.label's max_length


def upload_model(project: Project, user, manifest, weights, *, label: str = "") -> ModelUpload:
    """Store an uploaded `tool.json` and `model.safetensors` and queue their check by a worker.

    `manifest` and `weights` are uploaded files (anything with `chunks()` and `size`). `UploadRefused`, with
    nothing stored, for a manifest that is not a tool manifest of the project's tool or weights over the limit.
    """
    from annotate import tasks

    label = str(label).replace("\x00", "").strip()
    if len(label) > MAX_LABEL:
        raise UploadRefused(f"label: at most {MAX_LABEL} characters, got {len(label):,}")
    manifest_data = _manifest(project, manifest)
    limit = max_model_bytes()
    if weights.size > limit:
        raise UploadRefused(f"{WEIGHTS}: {storage.mib(weights.size)}, larger than the limit of {storage.mib(limit)} "
                            "(TC_MODEL_MAX_BYTES)")
    with transaction.atomic():
        upload = ModelUpload.objects.create(
            project=project, uploaded_by=user if getattr(user, "pk", None) else None,
            label=label, size=len(manifest_data) + weights.size,
        )
        directory = storage.artifact_dir("model-uploads", upload.pk)
        try:
            storage.write_once(directory / MANIFEST, manifest_data)
            storage.write_once(directory / WEIGHTS, weights.chunks(), max_bytes=limit)
        except storage.TooLarge as exc:  # the declared size was not the real one
            shutil.rmtree(directory, ignore_errors=True)
            raise UploadRefused(
                f"{WEIGHTS}: larger than the limit of {storage.mib(limit)} (TC_MODEL_MAX_BYTES)") from exc
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        tasks.check_model_upload.delay_on_commit(upload.pk)
    return upload


def check(upload_id: int) -> str:
    """Load a pending upload against its project's tool (worker only: imports torch) and record the outcome.

    ACCEPTED with the new version, or REFUSED with the reason. Safe to run twice: the row is locked while it is
    checked, and a checked upload is left alone.
    """
    from annotate import tooling

    with transaction.atomic():
        upload = (ModelUpload.objects.select_for_update(of=("self",)).select_related("project")
                  .filter(pk=upload_id).first())
        if upload is None or upload.state != UploadState.PENDING:
            return upload.state if upload else "missing"
        directory = upload.directory
        try:
            upload.version = tooling.register_version(
                upload.project, directory, label=upload.label or f"uploaded model {upload.pk}", trained=True
            )
        except (ValueError, OSError) as exc:  # the library's ToolError is a ValueError
            upload.state, upload.reason = UploadState.REFUSED, _readable(exc, directory)[:2000]
        else:
            upload.state = UploadState.ACCEPTED
        upload.checked_at = timezone.now()
        upload.save(update_fields=["state", "reason", "version", "checked_at"])
    shutil.rmtree(directory, ignore_errors=True)
    return upload.state


def remove_upload(upload: ModelUpload) -> None:
    """Remove a checked upload's record from the training page; the version it became stays.

    Refused (`UploadBeingChecked`) while it is pending: the worker holds the row and its files until it has
    accepted or refused them. The row is locked first, as the check locks it, so the two never interleave.
    A checked upload's files are gone already; any left (a check that died mid-way) go with the row.
    """
    directory = upload.directory
    with transaction.atomic():
        state = ModelUpload.objects.select_for_update().filter(pk=upload.pk).values_list("state", flat=True).first()
        if state is None:
            return  # removed meanwhile
        if state == UploadState.PENDING:
            raise UploadBeingChecked(f"Model upload {upload.pk} is being checked by a worker: remove it once it "
                                     "is accepted or refused.")
        ModelUpload.objects.filter(pk=upload.pk).delete()
        transaction.on_commit(lambda: shutil.rmtree(directory, ignore_errors=True))


def _manifest(project: Project, manifest) -> bytes:
    """The manifest's bytes, checked enough to refuse the wrong file at once (the worker checks all of it)."""
    try:
        data = read_limited(manifest, MAX_MANIFEST_BYTES)
    except ImportRejected as exc:
        raise UploadRefused(
            f"{MANIFEST}: larger than {storage.mib(MAX_MANIFEST_BYTES)}; is it the right file?") from exc
    try:
        document = loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UploadRefused(f"{MANIFEST}: not JSON ({exc})") from exc
    if not isinstance(document, dict) or document.get("format") != "tensorcode-tool":
        raise UploadRefused(f"{MANIFEST}: not a tool manifest (expected the tool.json that save_pretrained "
                            "writes, with \"format\": \"tensorcode-tool\")")
    if document.get("tool") != project.tool:
        raise UploadRefused(f"{MANIFEST}: a {document.get('tool')!r} tool, but this project uses {project.tool!r}")
    return data


def _readable(exc: Exception, directory: Path) -> str:
    """The library's message without the server's paths: "tool.json: ..." rather than "/srv/.../tool.json: ..."."""
    return str(exc).replace(f"{directory}/", "").replace(str(directory), "the uploaded files")
