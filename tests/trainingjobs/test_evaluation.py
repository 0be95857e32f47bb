"""A finished job's list of held-out items whose prediction changed: one row per item, however many reviewers."""

from __future__ import annotations

import html

import pytest
from django.urls import reverse

from trainingjobs import evaluation, runner, services
from trainingjobs.models import TrainingJob


def receipts_picking(picks: dict) -> callable:
    """A `_predict` whose versions pick `picks[version][question]`; records which inputs it was asked about."""
    asked = []

    def predict(version, inputs):
        asked.append([i["q"] for i in inputs])
        return [{"receipt": {"kind": "ranking", "selected_id": picks[version][i["q"]]}, "confidence": 0.5}
                for i in inputs]

    predict.asked = asked
    return predict


def test_an_item_with_several_records_is_one_row_with_each_target_counted(monkeypatch) -> None:
    predict = receipts_picking({"base": {"a": "db", "b": "db", "c": "db"},
                                "new": {"a": "dns", "b": "db", "c": "dns"}})
    monkeypatch.setattr(evaluation, "_predict", predict)
    examples = [(7, {"q": "a"}, "dns"), (8, {"q": "b"}, "db"), (7, {"q": "a"}, "db"), (7, {"q": "a"}, "dns"),
                (9, {"q": "c"}, "dns")]

    changed = evaluation.changed_predictions("base", "new", examples)

    assert predict.asked == [["a", "b", "c"], ["a", "b", "c"]]  # each item predicted once per version
    assert [row["item"] for row in changed] == [7, 9]
    assert changed[0]["targets"] == [{"target": "dns", "records": 2}, {"target": "db", "records": 1}]
    assert (changed[0]["before"], changed[0]["after"], changed[0]["target"]) == ("db", "dns", "dns")
    assert changed[1]["targets"] == [{"target": "dns", "records": 1}]


@pytest.fixture
def trained(project, reviewed) -> TrainingJob:
    """A job trained for one epoch from the project's current version, a quarter of its records held out."""
    job = services.launch(project, base_version=project.current_version, epochs=1, minibatch_size=4,
                          checkpoint_interval=10, lr=0.05, held_out_fraction=0.25)
    runner.train(job.pk, "worker-a")
    job.refresh_from_db()
    return job


def with_metrics(job: TrainingJob, *, base: float | None = None, new: float | None = None, **more) -> None:
    """Store `job`'s metrics with the held-out top-1 of base and new versions (and `more` keys) set as given."""
    metrics = {**job.metrics, **more}
    if base is not None:
        metrics["base"] = {**job.metrics["base"], "metric": "top1", "value": base}
        metrics["new"] = {**job.metrics["new"], "metric": "top1", "value": new}
    TrainingJob.objects.filter(pk=job.pk).update(metrics=metrics)


def test_job_page_lists_changed_items_with_their_reviewed_targets(client, admin, project, reviewed, trained) -> None:
    item = reviewed[0].pk
    rows = [{"item": item, "target": "db", "targets": [{"target": "db", "records": 2}, {"target": "dns", "records": 1}],
             "before": "dns", "after": "db", "before_confidence": 0.6, "after_confidence": 0.7}]
    with_metrics(trained, changed=rows, changed_count=1)
    client.force_login(admin)

    page = client.get(reverse("trainingjobs:job", args=[trained.pk])).content.decode()

    assert "Held-out items whose prediction changed (1)" in page
    link = reverse("item_detail", args=[project.slug, item])
    assert f'<a href="{link}">{item}</a>' in page
    assert 'db <span class="muted">(2 reviewers)</span> · dns <span class="muted">(1 reviewer)</span>' in page


def test_changed_targets_and_answers_read_as_json(client, admin, project, reviewed, trained) -> None:
    """A distribution target or a list of documents reads as one line of JSON, not as a Python dict or list; a
    row stored before rows listed their targets still shows its one target."""
    rows = [{"item": reviewed[0].pk, "target": {"db": 0.75, "dns": 0.25}, "before": ["d1", "d2"],
             "after": ["d2", "d1"], "before_confidence": 0.6, "after_confidence": 0.7}]
    with_metrics(trained, changed=rows, changed_count=1)
    client.force_login(admin)

    page = html.unescape(client.get(reverse("trainingjobs:job", args=[trained.pk])).content.decode())

    assert '<td>{"db": 0.75, "dns": 0.25}</td>' in page
    assert '<td>["d1", "d2"] <span class="muted">(0.60)</span></td>' in page
    assert "{'db'" not in page and "['d1'" not in page


def test_job_log_reads_in_the_viewers_time_zone(client, admin, project, reviewed) -> None:
    job = services.launch(project, base_version=project.current_version, epochs=1, minibatch_size=4)
    log = "14:00:00 a line written before stamps had dates\n2026-03-10T23:45:00Z queued\n2026-03-10T23:46:30Z leased"
    TrainingJob.objects.filter(pk=job.pk).update(log=log)
    assert TrainingJob.appended_log("", "hello").endswith("Z hello")  # stored in UTC, with its date
    client.force_login(admin)
    url = reverse("trainingjobs:job", args=[job.pk])

    utc = client.get(url).content.decode()
    assert "14:00:00 a line written before stamps had dates\n23:45:00 queued\n23:46:30 leased" in utc
    client.cookies["tc_tz"] = "Asia/Tokyo"  # UTC+9: the next morning
    assert "\n08:45:00 queued\n08:46:30 leased</pre>" in client.get(url).content.decode()


def test_verdict_follows_the_metrics_direction() -> None:
    def verdict(metric, base, new, base_loss=0.5, new_loss=0.5):
        return TrainingJob(metrics={"base": {"metric": metric, "value": base, "loss": base_loss},
                                    "new": {"metric": metric, "value": new, "loss": new_loss}}).held_out_verdict

    assert verdict("top1", 0.5, 0.75) == {"metric": "better", "loss": ""}
    assert verdict("accuracy", 0.9, 0.8, new_loss=0.6) == {"metric": "worse", "loss": "worse"}
    assert verdict("mse", 2.0, 1.5, new_loss=0.4) == {"metric": "better", "loss": "better"}  # lower is better
    assert verdict("mse", 1.5, 2.0) == {"metric": "worse", "loss": ""}
    assert TrainingJob(metrics={"base": None, "new": {"metric": "top1", "value": 1}}).held_out_verdict == {
        "metric": "", "loss": ""}  # no base version to compare with
    assert TrainingJob(metrics={}).held_out_verdict == {"metric": "", "loss": ""}


def test_promoting_a_version_that_did_worse_is_warned_of(client, admin, trained) -> None:
    client.force_login(admin)

    def page_with(base: float, new: float) -> str:
        with_metrics(trained, base=base, new=new, held_out=4)
        return client.get(reverse("trainingjobs:job", args=[trained.pk])).content.decode()

    worse = page_with(1.0, 0.5)
    assert ("The new version did worse than the base on the 4 held-out records (top1 0.500 against 1.000)"
            in worse)
    assert 'id="promote" class="secondary outline"' in worse  # still offered, no longer the page's main action
    assert '<td class="worse">0.500</td>' in worse
    better = page_with(0.5, 1.0)
    assert "did worse" not in better and '<button type="submit" id="promote">' in better
    assert '<td class="better">1.000</td>' in better


def test_the_jobs_table_marks_a_result_worse_than_its_base(client, admin, project, trained) -> None:
    client.force_login(admin)

    for base, new, marked in ((0.9, 0.6, True), (0.6, 0.9, False)):
        with_metrics(trained, base=base, new=new)
        page = client.get(reverse("trainingjobs:project_jobs", args=[project.slug])).content.decode()
        assert (f'(top1 {new:.3f}) <span class="worse-than-base">worse than its base ({base:.3f})</span>'
                in page) is marked


def test_a_refit_calibration_reads_in_words(client, admin, trained) -> None:
    report = {"temperature": 1.3712, "before": {"nll": 1.1234, "ece": 0.2101, "count": 6},
              "after": {"nll": 1.0456, "ece": 0.1539, "count": 6}}
    with_metrics(trained, calibration=report)
    client.force_login(admin)
    url = reverse("trainingjobs:job", args=[trained.pk])

    assert ("Verifier calibration refit on the held-out pairs: temperature 1.37 on 6 held-out pairs; NLL 1.12 to "
            "1.05, ECE 0.210 to 0.154.") in client.get(url).content.decode()
    with_metrics(trained, calibration={"report": "an older shape"})
    assert html.unescape(client.get(url).content.decode()).count('{"report": "an older shape"}') == 1
