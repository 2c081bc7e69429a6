"""Worker settings: the Rust worker's defaults, and errors that name the setting."""

import pytest

from chime_worker import ConfigError, Worker, WorkerConfig
from chime_worker.config import check_group, check_handler_name, check_worker_id, default_worker_id


def test_defaults_are_valid_and_those_of_the_rust_worker():
    config = WorkerConfig()
    config.validate(15.0)
    assert (config.poll_interval, config.heartbeat_interval, config.drain_grace, config.flush_grace) == (1, 2, 30, 10)
    assert (config.start_timeout, config.nak_delay, config.fetch_expiry, config.stop_grace) == (2, 1, 0.01, 1)
    assert (config.fence_margin, config.max_output_bytes) == (2, 64 * 1024)
    assert config.lease(15.0) == 13.0
    assert check_worker_id(default_worker_id()) is None


def test_bad_settings_are_named():
    ttl = 6.0
    cases = [
        (dict(threads=0), "threads"),
        (dict(heartbeat_interval=6.0), "heartbeat_interval"),
        (dict(heartbeat_interval=4.0), "heartbeat_interval"),
        (dict(fence_margin=1.1), "fence_margin"),
        (dict(fence_margin=6.0), "fence_margin"),
        (dict(max_output_bytes=0), "max_output_bytes"),
        (dict(max_output_bytes=512 * 1024 + 1), "max_output_bytes"),
        (dict(poll_interval=0), "poll_interval"),
        (dict(group="a b"), "group"),
        (dict(worker_id="a.b"), "worker_id"),
        (dict(subject_prefix="a.b"), "subject_prefix"),
        (dict(drain_grace=-1), "drain_grace"),
    ]
    for settings, setting in cases:
        with pytest.raises(ConfigError) as error:
            WorkerConfig(**settings).validate(ttl)
        assert error.value.setting == setting, (settings, error.value)
        assert str(error.value).startswith(setting)
    assert "heartbeat lease (4.0s" in str(pytest.raises(ConfigError, WorkerConfig(heartbeat_interval=4.0).validate, ttl).value)


def test_names_follow_the_protocol():
    assert check_group("reports") is None and check_group("eu.reports") is None
    for bad in ["", "a b", "a..b", ".a", "a.", "a*", "é", "x" * 65]:
        assert check_group(bad) is not None, bad
    assert check_worker_id("host-1_a") is None
    for bad in ["", "a.b", "a b", "a*", "a>", "x" * 129]:
        assert check_worker_id(bad) is not None, bad
    assert check_handler_name("my handler") is None
    for bad in ["", " lead", "trail ", "tab\there", "x" * 129]:
        assert check_handler_name(bad) is not None, bad


def test_a_worker_refuses_unknown_settings_and_bad_handlers():
    with pytest.raises(ConfigError, match="settings"):
        Worker(no_such_setting=1)
    worker = Worker(group="g", threads=1)

    async def handler(ctx):
        return None

    worker.add_handler("h", handler)
    with pytest.raises(ValueError, match="registered twice"):
        worker.add_handler("h", handler)
    with pytest.raises(ValueError, match="async function"):
        worker.add_handler("sync", lambda ctx: None)
    with pytest.raises(ValueError, match="invalid"):
        worker.add_handler(" padded", handler)
