#!/usr/bin/env python3
"""aria2's own clients against Haul: aria2p (PyPI; its Python API and its command line) drives `haul serve` through
aria2's JSON-RPC, and then drives `aria2c --enable-rpc` with the same script on the same machine. Each run writes down
what a client observes; the two must be the same, and each must hold on its own (files byte-identical, a resumed
download fetching only what it missed, the global limit applied, notifications in order). Run by .ci/aria2-test:

    python3 Tests/aria2/aria2p_test.py HAUL_BINARY

Every wait polls with a deadline; nothing sleeps to synchronise. Exits non-zero on the first failed expectation."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import aria2p

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import testnginx  # noqa: E402
from testnginx import free_port  # noqa: E402

haul = sys.argv[1]
work = tempfile.mkdtemp(prefix="haul-aria2p.")
os.chmod(work, 0o755)  # nginx's workers (another user when run as root) read www/ inside it
processes = []
SECRET = "aria2p-secret"
SMALL = 300_000
BIG = 6 * 1024 * 1024
failures = []


def expect(condition, text):
    print(f"    {'ok ' if condition else 'FAILED'} {text}", flush=True)
    if not condition:
        failures.append(text)


def until(predicate, text, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting: {text}")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def start_nginx():
    """nginx serving www/: /files/ at full speed, /slow/ at 1 MiB/s (slow enough to pause mid-download); its
    access log records each request's Range and the bytes it sent."""
    www = os.path.join(work, "www")
    for folder in ("files", "slow"):
        os.makedirs(os.path.join(www, folder))
    with open(os.path.join(www, "files", "small.bin"), "wb") as f:
        f.write(os.urandom(SMALL))
    for name in ("big.bin", "limited.bin", "watched.bin", "removed.bin", "cli.bin"):
        with open(os.path.join(www, "slow", name), "wb") as f:
            f.write(os.urandom(BIG))
    for i in range(3):
        with open(os.path.join(www, "files", f"queued-{i}.bin"), "wb") as f:
            f.write(os.urandom(1000 + i))
    with open(os.path.join(www, "files", "unlimited.bin"), "wb") as f:
        f.write(os.urandom(BIG))
    return testnginx.start_nginx(work, processes, "files/small.bin", access_log="$uri|$http_range|$body_bytes_sent")


def served(uri):
    """The (Range, bytes sent) of each request nginx answered for `uri`."""
    with open(os.path.join(work, "access.log")) as log:
        rows = [line.rstrip("\n").split("|") for line in log]
    return [(row[1], int(row[2])) for row in rows if row[0] == uri]


def start_haul(downloads):
    state = os.path.join(work, "haul-state")
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write(SECRET)
    processes.append(subprocess.Popen([haul, "serve", "--listen", "127.0.0.1:0", "--state-dir", state,
                                       "--download-dir", downloads, "--token-file", token, "--log-level", "error"]))
    info = os.path.join(state, "serve.json")

    def read():
        if os.path.exists(info):
            with open(info) as f:
                text = f.read()
            return json.loads(text) if text else None
    url = until(read, "haul serve to write serve.json")["url"]
    return int(url.rsplit(":", 1)[1]), processes[-1]


def start_aria2c(downloads):
    port = free_port()
    processes.append(subprocess.Popen([
        "aria2c", "--enable-rpc", f"--rpc-listen-port={port}", f"--rpc-secret={SECRET}", f"--dir={downloads}",
        "--max-concurrent-downloads=3", "--continue=true", "--quiet", "--no-conf",
        f"--save-session={os.path.join(work, 'aria2.session')}"]))
    until(lambda: reachable_rpc(port), "aria2c to answer")
    return port, processes[-1]


def reachable_rpc(port):
    try:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "system.listMethods"}).encode()
        urllib.request.urlopen(f"http://127.0.0.1:{port}/jsonrpc", body).read()
        return True
    except OSError:
        return False


def status(api, gid):
    return api.client.tell_status(gid)


def wait_status(api, gid, wanted, text, seconds=60):
    return until(lambda: status(api, gid)["status"] in wanted and status(api, gid), text, seconds)


def cli(port, *arguments):
    """The aria2p command line against the server at `port`; its output."""
    command = [sys.executable, "-m", "aria2p", "--host", "http://127.0.0.1", "--port", str(port), "--secret", SECRET, *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(arguments)} exited {result.returncode}: {result.stdout}{result.stderr}")
    return result.stdout


def scenario(name, port, process, downloads, nginx_port):
    """The same steps against one server; returns what a client observed that should not depend on the server."""
    print(f"  against {name}", flush=True)
    seen = {}
    api = aria2p.API(aria2p.Client(host="http://127.0.0.1", port=port, secret=SECRET, timeout=30))
    base = f"http://127.0.0.1:{nginx_port}"

    # Notifications: listened to over the WebSocket for the whole run, in a thread of aria2p's own.
    notes = []
    lock = threading.Lock()

    def record(kind):
        def callback(api_or_gid, gid=None):
            with lock:
                notes.append((kind, gid if gid is not None else api_or_gid))
        return callback
    api.listen_to_notifications(
        threaded=True, timeout=1, handle_signals=False,
        on_download_start=record("start"), on_download_pause=record("pause"), on_download_stop=record("stop"),
        on_download_complete=record("complete"), on_download_error=record("error"))

    # 1. Add a URL through the Python API; it completes, byte-identical.
    small = api.add_uris([f"{base}/files/small.bin"])
    done = wait_status(api, small.gid, {"complete", "error"}, "small.bin to complete")
    path = os.path.join(downloads, "small.bin")
    expect(done["status"] == "complete", f"{name}: small.bin completes ({done.get('errorMessage')})")
    expect(os.path.exists(path) and sha256(path) == sha256(os.path.join(work, "www/files/small.bin")),
           f"{name}: small.bin is byte-identical")
    seen["small"] = {key: done[key] for key in ("status", "totalLength", "completedLength")}
    seen["small.files"] = [(os.path.basename(f["path"]), f["length"], f["selected"]) for f in done["files"]]
    download = api.get_download(small.gid)
    seen["small.name"] = download.name
    seen["small.progress"] = download.progress

    # 2. Pause and unpause mid-download; only the missing bytes are fetched again.
    big = api.add_uris([f"{base}/slow/big.bin"])
    until(lambda: int(status(api, big.gid)["completedLength"]) > 1_500_000, "big.bin to pass 1.5 MB")
    api.pause([api.get_download(big.gid)])
    paused = wait_status(api, big.gid, {"paused"}, "big.bin to pause")
    held = int(paused["completedLength"])
    seen["paused.status"] = paused["status"]
    waiting = [d.gid for d in api.get_downloads() if d.status == "paused"]
    expect(big.gid in waiting, f"{name}: the paused download is listed as paused")
    api.resume([api.get_download(big.gid)])
    done = wait_status(api, big.gid, {"complete", "error"}, "big.bin to complete")
    expect(done["status"] == "complete", f"{name}: big.bin completes after unpause")
    expect(sha256(os.path.join(downloads, "big.bin")) == sha256(os.path.join(work, "www/slow/big.bin")),
           f"{name}: big.bin is byte-identical")
    requests = served("/slow/big.bin")
    resumed = [int(rng.split("=")[1].split("-")[0]) for rng, _ in requests if rng.startswith("bytes=")]
    fetched = sum(sent for _, sent in requests)
    print(f"      big.bin: paused holding {held} bytes; requests {requests}; {fetched} bytes sent in all")
    expect(any(start > 0 for start in resumed), f"{name}: the unpause asked for a range past 0")
    if name == "haul serve":
        # Haul's pause flushes the exact offset, so the next request starts at the byte the pause reported.
        expect(held in resumed, f"{name}: the unpause asked for the range from the {held} bytes held, no earlier")
    expect(fetched <= BIG + 1024 * 1024, f"{name}: at most 1 MiB fetched twice ({fetched - BIG} extra)")

    # 3. Lists: active, waiting (paused ones too), stopped.
    queued = [api.add_uris([f"{base}/files/queued-{i}.bin"], options={"pause": "true"}) for i in range(3)]
    watched = api.add_uris([f"{base}/slow/watched.bin"])
    wait_status(api, watched.gid, {"active"}, "watched.bin to start")
    active = [d["gid"] for d in api.client.tell_active(["gid", "status"])]
    waiting = api.client.tell_waiting(0, 100, ["gid", "status"])
    stopped = api.client.tell_stopped(0, 100, ["gid", "status"])
    expect(watched.gid in active, f"{name}: tellActive lists the running download")
    expect([w["gid"] for w in waiting] == [q.gid for q in queued], f"{name}: tellWaiting lists the three in order")
    seen["waiting.status"] = [w["status"] for w in waiting]
    seen["waiting.last"] = api.client.tell_waiting(-1, 1, ["gid"])[0]["gid"] == queued[-1].gid
    seen["stopped.status"] = sorted(s["status"] for s in stopped)
    seen["stat"] = {key: value for key, value in api.client.get_global_stat().items()
                    if key in ("numActive", "numWaiting", "numStopped")}
    # changePosition: the last waiting one to the front.
    seen["position"] = api.client.change_position(queued[-1].gid, 0, "POS_SET")
    seen["waiting.after_move"] = [w["gid"] for w in api.client.tell_waiting(0, 100, ["gid"])] == [
        queued[2].gid, queued[0].gid, queued[1].gid]

    # 4. Remove: the running one, through aria2p's remove (then its result is purged, as aria2p does).
    api.remove([api.get_download(watched.gid)])
    until(lambda: watched.gid not in [d["gid"] for d in api.client.tell_active(["gid"])], "watched.bin to stop")
    seen["removed.listed"] = watched.gid in [d.gid for d in api.get_downloads()]
    api.remove([api.get_download(q.gid) for q in queued])
    seen["queued.listed"] = [q.gid in [d.gid for d in api.get_downloads()] for q in queued]

    # 5. The global download limit: set, read back, and applied.
    expect(api.set_global_options({"max-overall-download-limit": "256K"}), f"{name}: changeGlobalOption says OK")
    seen["limit"] = api.client.get_global_option()["max-overall-download-limit"]
    limited = api.add_uris([f"{base}/files/unlimited.bin"])
    wait_status(api, limited.gid, {"active"}, "unlimited.bin to start")
    start = time.monotonic()
    first = int(status(api, limited.gid)["completedLength"])
    until(lambda: time.monotonic() - start > 2, "two seconds to pass", 5)
    rate = (int(status(api, limited.gid)["completedLength"]) - first) / (time.monotonic() - start)
    print(f"      unlimited.bin under a 256 KiB/s limit: {rate / 1024:.0f} KiB/s")
    expect(rate < 256 * 1024 * 2, f"{name}: the limit applies ({rate / 1024:.0f} KiB/s, limit 256)")
    api.set_global_options({"max-overall-download-limit": "0"})
    done = wait_status(api, limited.gid, {"complete", "error"}, "unlimited.bin to complete once the limit is gone")
    expect(done["status"] == "complete", f"{name}: unlimited.bin completes")

    # 6. A batch through system.multicall.
    results = api.client.multicall([
        {"methodName": "aria2.getGlobalStat", "params": []},
        {"methodName": "aria2.tellStatus", "params": [small.gid, ["gid", "status"]]},
        {"methodName": "aria2.tellStatus", "params": ["0123456789abcdef"]},
    ])
    print(f"      multicall: {results}")
    seen["multicall"] = [
        sorted(results[0][0].keys()), results[1][0] == {"gid": small.gid, "status": "complete"},
        {"code": results[2]["code"], "message": results[2]["message"]},
    ]

    # 7. The command line: add, pause, resume, remove, purge.
    cli(port, "add", f"{base}/slow/cli.bin")
    gid = until(lambda: next((d["gid"] for d in api.client.tell_active(["gid", "files"])
                               if d["files"][0]["uris"][0]["uri"].endswith("/cli.bin")), None), "cli.bin to start")
    cli(port, "pause", gid)
    seen["cli.pause"] = wait_status(api, gid, {"paused"}, "cli.bin to pause")["status"]
    cli(port, "resume", gid)
    seen["cli.resume"] = wait_status(api, gid, {"active", "waiting", "complete"}, "cli.bin to resume")["status"] != "paused"
    cli(port, "remove", gid)
    until(lambda: gid not in [d.gid for d in api.get_downloads()], "cli.bin to be removed")
    cli(port, "purge")
    seen["cli.after_purge"] = sorted(d.status for d in api.get_downloads())
    seen["cli.call"] = json.loads(cli(port, "call", "getglobalstat")).keys() >= {"numActive", "numWaiting"}

    # The notifications of big.bin, in order (aria2p calls back from its listening thread).
    until(lambda: any(kind == "complete" and gid == big.gid for kind, gid in notes), "big.bin's completion", 10)
    api.stop_listening()
    with lock:
        seen["notes.big"] = [kind for kind, gid in notes if gid == big.gid]
    print(f"      notifications of big.bin: {seen['notes.big']}")

    # 8. aria2.shutdown: the server exits by itself, with status 0.
    seen["shutdown"] = api.client.shutdown()
    try:
        seen["shutdown.exit"] = process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        seen["shutdown.exit"] = "still running 15 s after aria2.shutdown"
    return seen


def main():
    nginx_port = start_nginx()
    results = {}
    for name, start in (("haul serve", start_haul), ("aria2c", start_aria2c)):
        downloads = os.path.join(work, name.replace(" ", "-"))
        os.makedirs(downloads)
        open(os.path.join(work, "access.log"), "w").close()
        port, process = start(downloads)
        results[name] = scenario(name, port, process, downloads, nginx_port)
    haul_seen, aria2_seen = results["haul serve"], results["aria2c"]
    print("  the same observations from both:", flush=True)
    for key in sorted(set(haul_seen) | set(aria2_seen)):
        same = haul_seen.get(key) == aria2_seen.get(key)
        expect(same, f"{key}: haul {haul_seen.get(key)!r}" + ("" if same else f", aria2c {aria2_seen.get(key)!r}"))
    if failures:
        raise SystemExit(f"aria2p test: {len(failures)} expectations failed")
    print(f"aria2p test: {len(haul_seen)} observations the same against haul serve and aria2c")


try:
    main()
finally:
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
    shutil.rmtree(work, ignore_errors=True)
