"""A Chime client in Python, written from docs/API.md only.

Puts a job through the request/reply API, shows a validation error, submits a
job and a broken one through the durable submit stream, and reads the
rejection back. Prints one JSON summary line; exits non-zero on any surprise.

    python3 client.py nats://127.0.0.1:4222
"""

import asyncio
import json
import sys

import nats


async def call(nc, verb, body):
    reply = await nc.request(f"chime.api.v1.{verb}", json.dumps(body).encode(), timeout=5)
    return json.loads(reply.data)


async def main(url):
    nc = await nats.connect(url)
    js = nc.jetstream()
    summary = {}

    put = await call(nc, "jobs.put", {
        "id": "py-report", "group": "python", "handler": "shell",
        "schedule": {"cron": "0 30 2 * * *", "tz": "Europe/Berlin"},
        "payload": {"argv": ["true"]},
    })
    assert "job" in put, put
    summary["put_version"] = put["job"]["version"]
    summary["put_next_fire_at"] = put["job"]["next_fire_at"]

    bad = await call(nc, "jobs.put", {"id": "py-bad", "handler": "shell", "schedule": {"cron": "0 61 * * *"},
                                      "payload": {"argv": ["true"]}})
    assert "error" in bad, bad
    summary["error_code"] = bad["error"]["code"]
    summary["error_field"] = bad["error"]["field"]

    missing = await call(nc, "jobs.get", {"id": "no-such-job"})
    summary["missing_code"] = missing["error"]["code"]

    await js.publish("chime.submit", json.dumps({
        "id": "py-submitted", "handler": "shell", "schedule": {"every": "1h"},
        "payload": {"argv": ["true"]},
    }).encode())
    broken = b'{"id": "py-broken", "schedule": '
    await js.publish("chime.submit", broken)

    sub = await js.pull_subscribe("chime.submit.rejected", durable=None, stream="CHIME_SUBMIT")
    rejected = None
    for _ in range(50):
        try:
            msgs = await sub.fetch(1, timeout=0.5)
        except nats.errors.TimeoutError:
            continue
        for m in msgs:
            if m.data == broken:
                rejected = json.loads(m.headers["Chime-Error"])
            await m.ack()
        if rejected:
            break
    assert rejected, "the broken submission was not rejected"
    summary["rejected_code"] = rejected["error"]["code"]

    for _ in range(50):
        got = await call(nc, "jobs.get", {"id": "py-submitted"})
        if "job" in got:
            summary["submitted_state"] = got["job"]["state"]
            break
        await asyncio.sleep(0.2)
    assert "submitted_state" in summary, "the submitted job never appeared"

    print(json.dumps(summary, sort_keys=True))
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
