"""Metrics carry the Rust worker's names, each with the worker's group, and nothing else."""

from chime_worker.metrics import Metrics


def test_every_metric_is_exposed_under_its_contract_name():
    metrics = Metrics("reports")
    metrics.set_in_flight(1, 4)
    metrics.firing_finished("shell", "succeeded", 0.2)
    metrics.start_refusal("already_started")
    metrics.start_lateness(0.004)
    metrics.start_decision(0.001)
    metrics.service_restart("fetch")
    text = metrics.render().decode()
    for expected in [
        'chime_worker_in_flight{group="reports"} 1.0',
        'chime_worker_free_threads{group="reports"} 3.0',
        'chime_worker_threads{group="reports"} 4.0',
        'chime_worker_firings_total{group="reports",handler="shell",outcome="succeeded"} 1.0',
        'chime_worker_run_duration_seconds_bucket{group="reports",handler="shell",le="0.5"} 1.0',
        'chime_worker_start_lateness_seconds_bucket{group="reports",le="0.001"} 0.0',
        'chime_worker_start_decision_seconds_count{group="reports"} 1.0',
        'chime_worker_fetch_errors_total{group="reports"} 0.0',
        'chime_worker_start_refusals_total{group="reports",reason="already_started"} 1.0',
        'chime_worker_bad_messages_total{group="reports"} 0.0',
        'chime_worker_report_retries_total{group="reports"} 0.0',
        'chime_worker_fenced_total{group="reports"} 0.0',
        'chime_service_restarts_total{group="reports",service="fetch"} 1.0',
        'chime_clock_offset_seconds{group="reports"} 0.0',
    ]:
        assert expected in text, f"{expected} missing from\n{text}"
    assert "_created" not in text


def test_two_workers_in_one_process_keep_their_own_series():
    a, b = Metrics("a"), Metrics("b")
    a.bad_message()
    assert 'chime_worker_bad_messages_total{group="a"} 1.0' in a.render().decode()
    assert 'chime_worker_bad_messages_total{group="b"} 0.0' in b.render().decode()
