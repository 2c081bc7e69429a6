#!/usr/bin/env python3
"""A Chime worker in Python, written from docs/PROTOCOL.md alone.

It proves the protocol document is enough to build a worker in another
language. It serves one group with a few handlers (`echo` returns the
payload, `sleep` sleeps `payload["seconds"]`, `fail` fails, `shard` returns
`<shard>/<shards>` of a sharded job's firing), and follows the
protocol's steps: setup, pulling by free threads highest band first, start
request, ack/NAK, deadline, finished event with retries, heartbeat (with
the firings it runs), cancel, shutdown (runs it stops are reported
interrupted).

    pip install nats-py
    python3 worker.py --nats-url nats://127.0.0.1:4222 --group default --count 1

Prints "python worker ready" once it is pulling. With --count N it exits
after N firings have run and their finished events were stored.
"""

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import socket
import sys
from datetime import datetime, timedelta, timezone

import nats
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

BANDS = ["high", "normal", "low"]
MAX_OUTPUT = 64 * 1024
VERSION = "py-0.1.0"


def now():
    return datetime.now(timezone.utc)


def fmt_time(t):
    """RFC 3339, UTC, milliseconds, Z."""
    return t.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(text):
    return datetime.fromisoformat(text.strip().replace("Z", "+00:00")).astimezone(timezone.utc)


def tail(text, limit=MAX_OUTPUT):
    """The last `limit` bytes of text, cut on a character boundary."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[-limit:].decode("utf-8", errors="ignore")


def consumer_name(group, band):
    if "." in group:
        return "fire_h_%s_%s" % (group.encode("utf-8").hex(), band)
    return "fire_g_%s_%s" % (group, band)


def parse_firing_id(text):
    """`<job id>@<ms>#<attempt>`, or `<job id>@<ms>.<shard>#<attempt>` for a
    shard of a sharded job; the shard is None when there is none."""
    job, rest = text.rsplit("@", 1)
    instant, attempt = rest.split("#", 1)
    if not job:
        raise ValueError("empty job id")
    shard = None
    if "." in instant:
        instant, shard_text = instant.split(".", 1)
        if not shard_text.isdigit():
            raise ValueError("bad shard %r" % shard_text)
        shard = int(shard_text)
    return job, int(instant), shard, int(attempt)


class BadMessage(Exception):
    pass


def read_firing(msg):
    """Checks a firing message (PROTOCOL.md section 3)."""
    headers = msg.headers or {}

    def need(name):
        value = (headers.get(name) or "").strip()
        if not value:
            raise BadMessage("header %s is missing" % name)
        return value

    try:
        firing_id = need("Chime-Firing-Id")
        job, _ms, shard, attempt = parse_firing_id(firing_id)
        shards = None
        if shard is not None:
            if int(need("Chime-Shard")) != shard:
                raise BadMessage("Chime-Shard does not match the firing id")
            shards = int(need("Chime-Shards"))
            if not 0 <= shard < shards:
                raise BadMessage("Chime-Shards does not cover the shard")
        if need("Chime-Job-Id") != job:
            raise BadMessage("Chime-Job-Id does not match the firing id")
        if int(need("Chime-Attempt")) != attempt:
            raise BadMessage("Chime-Attempt does not match the firing id")
        priority = int(need("Chime-Priority"))
        if not 0 <= priority <= 9:
            raise BadMessage("Chime-Priority out of range")
        scheduled_at = parse_time(need("Chime-Scheduled-At"))
        due = (headers.get("Chime-Due-At") or "").strip()
        timeout_ms = (headers.get("Chime-Timeout-Ms") or "").strip()
        body = msg.data.strip()
        return {
            "firing_id": firing_id,
            "job_id": job,
            "handler": need("Chime-Handler"),
            "scheduled_at": scheduled_at,
            "due_at": parse_time(due) if due else scheduled_at,
            "attempt": attempt,
            "priority": priority,
            "deadline": parse_time(need("Chime-Deadline")),
            "timeout_ms": int(timeout_ms) if timeout_ms else None,
            "payload": json.loads(body) if body else None,
            # A shard of a sharded job's instant: which one, of how many.
            "shard": shard,
            "shards": shards,
            # What the scheduler compares with the firing it staged (section 4).
            "payload_sha256": hashlib.sha256(msg.data).hexdigest(),
        }
    except BadMessage:
        raise
    except Exception as e:  # garbage of any kind
        raise BadMessage(str(e))


class HandlerError(Exception):
    pass


async def echo(firing):
    return json.dumps(firing["payload"])


async def sleep(firing):
    await asyncio.sleep(float((firing["payload"] or {}).get("seconds", 1)))
    return "slept"


async def fail(firing):
    raise HandlerError("asked to fail")


async def shard(firing):
    """Which part of its instant this firing is: `<shard>/<shards>`."""
    if firing["shard"] is None:
        return "unsharded"
    return "%d/%d" % (firing["shard"], firing["shards"])


HANDLERS = {"echo": echo, "sleep": sleep, "fail": fail, "shard": shard}


class Worker:
    def __init__(self, args):
        self.args = args
        self.prefix = args.subject_prefix
        self.group = args.group
        self.worker_id = args.worker_id or "%s-%08x" % (
            "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())[:64] or "worker",
            random.getrandbits(32),
        )
        self.threads = args.threads
        self.in_flight = 0
        self.started_at = now()
        self.running = {}  # firing id -> (task, cancel reason holder)
        # Firings whose start was asked and not given up on, or accepted,
        # until their finished event is stored: the heartbeat's `running`.
        self.listed = set()
        self.recent = set()  # firing ids finished here
        self.wake = asyncio.Event()
        self.stopping = asyncio.Event()
        self.done = 0
        self.reports = set()

    # --- names (PROTOCOL.md: replace the "chime" prefix) ---
    def subj(self, rest):
        return "%s.%s" % (self.prefix, rest)

    def upper(self):
        return self.prefix.upper().replace("-", "_")

    # --- 1. setup ---
    async def setup(self):
        self.nc = await nats.connect(self.args.nats_url, name="chime-python-worker " + self.worker_id,
                                     max_reconnect_attempts=-1, reconnect_time_wait=0.5)
        self.js = self.nc.jetstream()
        fire = self.upper() + "_FIRE"
        events = self.upper() + "_EVENTS"
        # A worker never creates NATS objects: schedulers do. Wait for the
        # heartbeat bucket, register (a scheduler creates the consumers of the
        # groups it sees there), then wait for the streams and consumers.
        bucket = "%s-workers" % self.prefix
        self.kv = None
        self.kv = await self.wait_for("bucket " + bucket, lambda: self.js.key_value(bucket))
        await self.heartbeat_once()
        for name in (fire, events):
            await self.wait_for("stream " + name, lambda name=name: self.js.stream_info(name))
        self.fire_stream = fire
        self.consumers = []
        for band in BANDS:
            name = consumer_name(self.group, band)
            await self.wait_for("consumer " + name, lambda name=name: self.js.consumer_info(fire, name))
            self.consumers.append(name)
        await self.nc.subscribe(self.subj("ready.%s" % self.group), cb=self.on_doorbell)
        await self.nc.subscribe(self.subj("cancel.%s" % self.worker_id), cb=self.on_cancel)
        await self.heartbeat_once()

    async def wait_for(self, what, look):
        delay = 0.1
        while True:
            try:
                return await look()
            except Exception as e:
                print("waiting for a scheduler to create %s: %s" % (what, e), file=sys.stderr, flush=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                if self.kv is not None:
                    # Keep the registration alive (key TTL 6 s) while waiting.
                    try:
                        await self.heartbeat_once()
                    except Exception as e:
                        print("heartbeat failed: %s" % e, file=sys.stderr, flush=True)

    # --- 7. heartbeat ---
    def heartbeat_key(self):
        """`<group>.<worker id>`: NATS permissions confine a group's workers to its keys."""
        return "%s.%s" % (self.group, self.worker_id)

    async def heartbeat_once(self):
        info = {
            "id": self.worker_id,
            "group": self.group,
            "threads": self.threads,
            "in_flight": self.in_flight,
            "version": VERSION,
            "started_at": fmt_time(self.started_at),
        }
        if len(self.listed) <= 1000:  # past the bound, left out
            info["running"] = sorted(self.listed)
        await self.kv.put(self.heartbeat_key(), json.dumps(info).encode())

    async def heartbeat_loop(self):
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), timeout=2.0)
            except asyncio.TimeoutError:
                pass
            if self.stopping.is_set():
                return
            try:
                await self.heartbeat_once()
            except Exception as e:
                print("heartbeat failed: %s" % e, file=sys.stderr, flush=True)

    # --- 2. pulling ---
    async def on_doorbell(self, _msg):
        self.wake.set()

    async def fetch(self, consumer, batch, expires=0.01):
        """One pull request: batch, no_wait, expires (PROTOCOL.md section 2)."""
        inbox = self.nc.new_inbox()
        sub = await self.nc.subscribe(inbox)
        got = []
        try:
            request = {"batch": batch, "no_wait": True, "expires": int(expires * 1e9)}
            await self.nc.publish("$JS.API.CONSUMER.MSG.NEXT.%s.%s" % (self.fire_stream, consumer),
                                  json.dumps(request).encode(), reply=inbox)
            while len(got) < batch:
                try:
                    msg = await sub.next_msg(timeout=expires + 2.0)
                except NatsTimeout:
                    break
                status = (msg.headers or {}).get("Status")
                if status:  # 404 no messages, 408 request expired, ...: the batch is over
                    break
                got.append(msg)
        finally:
            await sub.unsubscribe()
        return got

    async def pull_loop(self):
        while not self.stopping.is_set():
            # Cleared before fetching, not after: a doorbell that rings
            # while a fetch is in flight is remembered and fetched for.
            self.wake.clear()
            fetched = 0
            for consumer in self.consumers:
                free = self.threads - self.in_flight
                if free <= 0:
                    break
                try:
                    messages = await self.fetch(consumer, free)
                except Exception as e:
                    print("fetch failed: %s" % e, file=sys.stderr, flush=True)
                    messages = []
                for msg in messages:
                    self.in_flight += 1
                    asyncio.ensure_future(self.dispatch(msg))
                fetched += len(messages)
            if fetched and self.threads - self.in_flight > 0:
                continue
            try:
                await asyncio.wait_for(self.wake.wait(), timeout=1.0)  # doorbell, firing end, or poll interval
            except asyncio.TimeoutError:
                pass

    # --- 3.-6. one message ---
    async def ack(self, msg, payload):
        try:
            await self.nc.publish(msg.reply, payload)
        except Exception as e:
            print("ack failed: %s" % e, file=sys.stderr, flush=True)

    async def dispatch(self, msg):
        try:
            await self.handle(msg)
        finally:
            self.in_flight -= 1
            self.wake.set()

    async def handle(self, msg):
        try:
            firing = read_firing(msg)
        except BadMessage as e:
            print("terminating a bad message: %s" % e, file=sys.stderr, flush=True)
            await self.ack(msg, b"+TERM")
            return
        fid = firing["firing_id"]
        if fid in self.running or fid in self.recent:
            await self.ack(msg, b"+ACK")  # a second delivery of an attempt we hold
            return

        self.listed.add(fid)
        request = json.dumps({
            "firing_id": fid,
            "worker_id": self.worker_id,
            "group": self.group,
            "handler": firing["handler"],
            "payload_sha256": firing["payload_sha256"],
        }).encode()
        reply = None
        for _ in range(2):
            try:
                answer = await self.nc.request(self.subj("worker.v1.start." + self.group + "." + self.worker_id), request, timeout=5)
                reply = json.loads(answer.data)
                break
            except NatsTimeout:
                continue
            except NoRespondersError:
                break
            except Exception:
                break
        error = reply.get("error") if isinstance(reply, dict) else None
        if isinstance(error, dict) and error.get("code") != "unavailable":
            # The scheduler cannot decide this firing: ask again later, less
            # often each time, and drop it at the 8th delivery.
            try:
                delivered = msg.metadata.num_delivered
            except Exception:
                delivered = 1
            self.listed.discard(fid)
            if delivered >= 8:
                print("the scheduler keeps rejecting %s; dropping it" % fid, file=sys.stderr, flush=True)
                await self.ack(msg, b"+TERM")
            else:
                delay_ns = min(2 ** (delivered - 1), 60) * 1_000_000_000
                await self.ack(msg, b'-NAK {"delay": %d}' % delay_ns)
            return
        if not isinstance(reply, dict) or "accepted" not in reply:
            self.listed.discard(fid)
            await self.ack(msg, b'-NAK {"delay": 1000000000}')
            return
        if not reply["accepted"]:
            self.listed.discard(fid)
            await self.ack(msg, b"+ACK")
            return
        await self.ack(msg, b"+ACK")

        started_at = now()
        if reply.get("deadline"):
            deadline = parse_time(reply["deadline"])
        elif firing["timeout_ms"] is not None:
            deadline = started_at + timedelta(milliseconds=firing["timeout_ms"])
        else:
            deadline = firing["deadline"]

        cancel_reason = {}
        handler = HANDLERS.get(firing["handler"])
        outcome, error, output, interrupted = "succeeded", None, None, None
        if handler is None:
            outcome, error = "failed", "no handler named %s on this worker" % firing["handler"]
        else:
            task = asyncio.ensure_future(handler(firing))
            self.running[fid] = (task, cancel_reason)
            try:
                remaining = max((deadline - now()).total_seconds(), 0)
                output = await asyncio.wait_for(task, timeout=remaining)
            except asyncio.TimeoutError:
                outcome, error = "timed_out", "timed out: the deadline %s passed" % fmt_time(deadline)
            except asyncio.CancelledError:
                outcome, error = "cancelled", cancel_reason.get("reason", "cancelled")
            except HandlerError as e:
                outcome, error = "failed", str(e)
            except Exception as e:
                outcome, error = "failed", "handler crashed: %r" % e
            finally:
                self.running.pop(fid, None)
                if task.cancelled() and "reason" in cancel_reason:
                    outcome, error = "cancelled", cancel_reason["reason"]
                if task.cancelled() and cancel_reason.get("interrupted"):
                    # Stopped by the worker, not by a cancel request: `failed`
                    # and interrupted, so it runs again elsewhere (section 6).
                    outcome, interrupted = "failed", cancel_reason["interrupted"]
        self.recent.add(fid)
        finished = {
            "firing_id": fid,
            "worker_id": self.worker_id,
            "outcome": outcome,
            "started_at": fmt_time(started_at),
            "finished_at": fmt_time(now()),
        }
        if error:
            finished["error"] = error[:8192]
        if output:
            finished["output"] = tail(output)
        if interrupted:
            finished["interrupted"] = interrupted
        report = asyncio.ensure_future(self.report(finished))
        self.reports.add(report)
        report.add_done_callback(self.reports.discard)

    async def report(self, finished):
        """Publish with Nats-Msg-Id finished:<id>, retrying until acked (section 6)."""
        body = json.dumps(finished).encode()
        headers = {"Nats-Msg-Id": "finished:" + finished["firing_id"]}
        delay = 0.1
        while True:
            try:
                await self.js.publish(
                    self.subj("events.finished." + self.group + "." + self.worker_id), body, headers=headers, timeout=5
                )
                break
            except Exception as e:
                print("finished event not stored yet: %s" % e, file=sys.stderr, flush=True)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
        self.listed.discard(finished["firing_id"])
        self.done += 1
        if self.args.count and self.done >= self.args.count:
            self.stopping.set()
            self.wake.set()

    # --- 8. cancel ---
    async def on_cancel(self, msg):
        try:
            request = json.loads(msg.data)
            entry = self.running.get(request["firing_id"])
        except Exception:
            return
        if entry:
            task, reason = entry
            reason["reason"] = request.get("reason", "cancelled")
            task.cancel()
        if msg.reply:
            await self.nc.publish(msg.reply, json.dumps({"running": bool(entry)}).encode())

    # --- 9. shutdown ---
    async def run(self):
        await self.setup()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: (self.stopping.set(), self.wake.set()))
        print("python worker ready id=%s group=%s" % (self.worker_id, self.group), flush=True)
        beats = asyncio.ensure_future(self.heartbeat_loop())
        pull = asyncio.ensure_future(self.pull_loop())
        await self.stopping.wait()
        await pull
        grace_end = loop.time() + self.args.drain_grace
        while self.running and loop.time() < grace_end:
            await asyncio.sleep(0.05)
        for task, reason in list(self.running.values()):
            reason["reason"] = "worker shutting down"
            reason["interrupted"] = "shutdown"
            task.cancel()
        while self.in_flight and loop.time() < grace_end + 5:
            await asyncio.sleep(0.05)
        if self.reports:
            await asyncio.wait(list(self.reports), timeout=10)
        await beats
        try:
            await self.kv.delete(self.heartbeat_key())
        except Exception as e:
            print("cannot delete the heartbeat key: %s" % e, file=sys.stderr, flush=True)
        await self.nc.drain()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats-url", default=os.environ.get("CHIME_NATS_URL", "nats://127.0.0.1:4222"))
    parser.add_argument("--group", default=os.environ.get("CHIME_GROUP", "default"))
    parser.add_argument("--worker-id", default=os.environ.get("CHIME_WORKER_ID"))
    parser.add_argument("--subject-prefix", default=os.environ.get("CHIME_SUBJECT_PREFIX", "chime"))
    parser.add_argument("--threads", type=int, default=int(os.environ.get("CHIME_THREADS", "2")))
    parser.add_argument("--drain-grace", type=float, default=30.0)
    parser.add_argument("--count", type=int, default=0, help="exit after this many firings (0: run until SIGTERM)")
    args = parser.parse_args()
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    asyncio.run(Worker(args).run())


if __name__ == "__main__":
    main()
