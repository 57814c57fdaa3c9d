#!/usr/bin/env python3
"""Drives one daemon (haul serve or aria2c --enable-rpc) through the daemon benchmark and prints JSON timings.

    daemon.py haul URL TOKEN COUNT [PID] [--batch-only]     (the REST API)
    daemon.py aria2 URL SECRET COUNT [PID] [--batch-only]   (aria2's JSON-RPC)

Steps, each timed with the clock around it: COUNT paused downloads added one request at a time from 16 client
threads (each with its own keep-alive connection; bench/daemon.sh does this step with the compiled addclient
instead and passes --batch-only, since this Python client alone needs 1.4 s for 10,000 requests); COUNT more in
one request (a JSON list for haul, system.multicall for aria2c); listing all 2*COUNT; reading one download 1000
times. The URLs point at a closed port: they are added paused and never fetched. With PID, the daemon's memory
(resident and peak, MiB) after each step."""
import http.client
import json
import sys
import threading
import time
import urllib.parse

kind, base, secret, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
batch_only = "--batch-only" in sys.argv
arguments = [a for a in sys.argv if a != "--batch-only"]
pid = arguments[5] if len(arguments) > 5 else None


def memory():
    """The daemon's resident and peak memory in MiB now (when its pid was given)."""
    if pid is None:
        return None
    fields = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return [round(int(fields[k].split()[0]) / 1024, 1) for k in ("VmRSS", "VmHWM")]


memory_after = {}
parsed = urllib.parse.urlparse(base)


def connection():
    return http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=600)


def call(conn, method, path, body=None):
    headers = {"Content-Type": "application/json"}
    if kind == "haul":
        headers["Authorization"] = "Bearer " + secret
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    if response.status >= 300:
        raise SystemExit(f"{method} {path}: {response.status} {payload[:300]!r}")
    return json.loads(payload) if payload else None


def rpc(conn, method, params, token=True):
    answer = call(conn, "POST", "/jsonrpc", {"jsonrpc": "2.0", "id": "b", "method": method,
                                            "params": (["token:" + secret] if token else []) + params})
    if "error" in answer:
        raise SystemExit(f"{method}: {answer['error']}")
    return answer["result"]


def url(index):
    return f"http://127.0.0.1:9/file{index:06}.bin"


def add_one(conn, index):
    if kind == "haul":
        call(conn, "POST", "/api/v1/downloads", {"url": url(index), "paused": True})
    else:
        rpc(conn, "aria2.addUri", [[url(index)], {"pause": "true"}])


timings = {}

# 1. One by one from 16 threads.
errors = []


def worker(indices):
    conn = connection()
    try:
        for index in indices:
            add_one(conn, index)
    except BaseException as error:  # noqa: BLE001 - reported below
        errors.append(error)


if not batch_only:
    threads = [threading.Thread(target=worker, args=(range(t, count, 16),)) for t in range(16)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    timings["oneByOne"] = time.monotonic() - start
    memory_after["oneByOne"] = memory()
    if errors:
        raise SystemExit(f"adding one by one failed: {errors[0]}")

# 2. One batch.
conn = connection()
start = time.monotonic()
if kind == "haul":
    added = call(conn, "POST", "/api/v1/downloads",
                 [{"url": url(count + i), "paused": True} for i in range(count)])
    assert len(added["downloads"]) == count
else:
    calls = [{"methodName": "aria2.addUri", "params": ["token:" + secret, [url(count + i)], {"pause": "true"}]}
             for i in range(count)]
    results = rpc(conn, "system.multicall", [calls], token=False)
    assert len(results) == count
timings["batch"] = time.monotonic() - start
memory_after["batch"] = memory()

# 3. List all.
start = time.monotonic()
if kind == "haul":
    listed = call(conn, "GET", "/api/v1/downloads")["downloads"]
    first = listed[0]["id"]
else:
    listed = rpc(conn, "aria2.tellWaiting", [0, 2 * count + 10])
    first = listed[0]["gid"]
timings["list"] = time.monotonic() - start
memory_after["list"] = memory()
if len(listed) != 2 * count:
    raise SystemExit(f"listed {len(listed)} downloads, not {2 * count}")

# 4. One download, 1000 times.
start = time.monotonic()
for _ in range(1000):
    if kind == "haul":
        call(conn, "GET", f"/api/v1/downloads/{first}")
    else:
        rpc(conn, "aria2.tellStatus", [first])
timings["read1000"] = time.monotonic() - start
memory_after["read1000"] = memory()

if pid is not None:
    timings["memory"] = memory_after
print(json.dumps(timings))
