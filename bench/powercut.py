#!/usr/bin/python3
"""Power cuts: runs Haul on the power-cut file system (Tests/support/powercut), cuts the power at random moments,
mounts what a disk would have kept, checks Haul's promises, runs the same command again and checks the result.

    bench/powercut.py [--cuts N] [--seed S] [--haul PATH] [--scenarios a,b] [--keep-work]

First a self-test proves the file system bites: a file renamed into place without fsync is lost or wrong after a
cut, and one written with fsync, rename, fsync of the folder is kept. Then N cuts, spread over the scenarios:

    single     haul get -x 1 of 8 MiB at 8 MB/s
    segmented  haul get -x 8 of 16 MiB at 4 MB/s a connection
    batch      haul get -j 16 -i LIST of 120 files of 8-64 KiB
    serve      haul serve with API adds, pauses, removes and moves in flight
    commit     haul get -x 4, cut by the file system itself at a chosen write to the store's -wal file
    continue   haul get -c -x 1 of 8 MiB at 8 MB/s, continuing the user's file that holds its first 2 MiB
    giveback   the same with -x 1 or 2 at 4 MB/s a connection, removed with haul rm, which gives the user's file
               back; the cut comes before a chosen change to the disk as the download hands the file over (haul rm
               after it), or after Ctrl-C as haul rm gives it back

The store (--state-dir) and the downloads both live on the file system. After every cut, these must hold:
    - every file under a final name is complete and identical to its source (or, continuing with -c, the user's
      file as it was, or as it was given back);
    - the user's bytes of a file handed over with -c are still its first bytes, under its name or the part file's;
      under the part file's, a row records the file as handed over from its name and counts them;
    - a file given back is the start of its source, at least the user's bytes, and it is back under its name once
      its download is gone from the store;
    - the store opens (haul ls);
    - every download an API answer acknowledged (201) is in the store, unless its removal was asked after (a removal
      in flight at the cut may have taken effect unanswered: the download is then cancelled, or gone);
    - every checkpoint (durableOffset, segments) counts only bytes that are in the part file;
    - the same command again ends with every file identical;
    - the bytes fetched again stay within one checkpoint per connection (counted apart, as "over bound").
Prints, last: "cuts N, violations V, over bound B, refetched per cut mean M MiB, max X MiB"; exits 1 when V > 0.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "Tests", "support"))
from testnginx import start_nginx  # noqa: E402

MiB = 1 << 20
# What the user holds of one.bin in the `continue` scenario: its first 2 MiB, under its final name.
HANDED_OVER = 2 * MiB
# Haul's checkpoints: every second while bytes arrive (DownloadManager.Configuration.Engine.checkpointInterval).
CHECKPOINT_SECONDS = 1.0


def build_file_system(work):
    """Compiles the power-cut file system (libfuse3) into `work`."""
    binary = os.path.join(work, "powercut")
    source = os.path.join(ROOT, "Tests", "support", "powercut", "powercut.c")
    flags = subprocess.run(["pkg-config", "fuse3", "--cflags", "--libs"], capture_output=True, text=True)
    if flags.returncode != 0:
        raise SystemExit("powercut: libfuse3 is missing (apt-get install libfuse3-dev fuse3 pkg-config)")
    subprocess.run(["cc", "-O2", "-Wall", "-o", binary, source] + flags.stdout.split(), check=True)
    return binary


class Disk:
    """One mount of the power-cut file system at `mountpoint` over `backing`. Every mount uses the same mount point,
    so the kernel gives each the same device number, as a disk keeps its own across a reboot."""

    def __init__(self, binary, mountpoint, backing, nodes=None, keep="none", seed=1, cut_at=None, live=None):
        self.mountpoint, self.backing = mountpoint, backing
        self.control = backing + ".control"
        self.image = backing + ".image"
        self.log = open(backing + ".log", "w")
        os.mkfifo(self.control)
        command = [binary, backing, mountpoint, "--control", self.control, "--image", self.image,
                   "--keep", keep, "--seed", str(seed)]
        if nodes:
            command += ["--nodes", nodes]
        if cut_at:
            command += ["--cut-at-write", cut_at]
        self.process = subprocess.Popen(command, stdout=self.log, stderr=self.log)
        if live is not None:
            live.append(self)
        deadline = time.monotonic() + 10
        while not os.path.ismount(mountpoint):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"powercut: the file system did not mount: {open(backing + '.log').read()}")
            time.sleep(0.01)

    def was_cut(self):
        return os.path.exists(self.control + ".done")

    def cut(self):
        """The power cut: the file system keeps what a disk would and fails everything after."""
        if not self.was_cut():
            with open(self.control, "w") as control:
                control.write("cut\n")
        deadline = time.monotonic() + 30
        while not self.was_cut():
            if time.monotonic() > deadline:
                raise SystemExit("powercut: the file system did not finish its cut")
            time.sleep(0.005)

    def arm(self, changes, suffix):
        """The cut comes before the `changes`th change to the file system (a create, write, truncate, rename, link,
        unlink or sync), counted from the first change to a file whose name ends with `suffix`."""
        with open(self.control, "w") as control:
            control.write(f"arm {changes} {suffix}\n")
        deadline = time.monotonic() + 10
        while not os.path.exists(self.control + ".armed"):
            if time.monotonic() > deadline:
                raise SystemExit("powercut: the file system did not arm its cut")
            time.sleep(0.002)

    def unmount(self):
        if self.process.poll() is not None:
            return
        subprocess.run(["umount", "-l", self.mountpoint], check=False)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def cut_summary(self):
        with open(self.backing + ".log") as log:
            lines = [line.strip() for line in log if "cut (" in line]
        return lines[-1] if lines else ""


def held_prefix(row):
    """The bytes a row counts as held from the file's first byte (DownloadRecord.heldPrefix)."""
    if not row["segments"]:
        return row["durableOffset"]
    end = 0
    for segment in sorted(json.loads(row["segments"]), key=lambda s: s["start"]):
        if segment["start"] > end:
            break
        end = max(end, segment["offset"])
    return end


def sha(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Run:
    """What the driver shares across cuts: the work folder, nginx, the sources, the file system's binary."""

    def __init__(self, haul, keep_work):
        self.haul = haul
        self.keep_work = keep_work
        self.live = []  # haul processes and mounted disks of the cut in progress, for close()
        self.work = tempfile.mkdtemp(prefix="haul-powercut.")
        os.chmod(self.work, 0o755)  # nginx's worker reads www as nobody
        self.processes = []
        self.binary = build_file_system(self.work)
        self.www = os.path.join(self.work, "www")
        self.mountpoint = os.path.join(self.work, "mnt")
        os.makedirs(self.mountpoint)
        self.sources = {}  # name -> bytes
        generator = random.Random(7)
        for folder in ("r8", "r4"):
            os.makedirs(os.path.join(self.www, folder))
        self.add_source("one.bin", 8 * MiB, generator)
        self.add_source("seg.bin", 16 * MiB, generator)
        for index in range(120):
            self.add_source(f"s{index:03}.bin", generator.randrange(8 << 10, 64 << 10), generator)
        for index in range(10):
            self.add_source(f"d{index}.bin", generator.randrange(1 * MiB, 3 * MiB), generator)
        # $arg_cut tags each request with the cut it belongs to.
        self.port = start_nginx(
            self.work, self.processes, "r8/one.bin", access_log="$arg_cut $uri $body_bytes_sent",
            locations="location /r8/ { limit_rate 8m; } location /r4/ { limit_rate 4m; }")
        self.digests = {name: hashlib.sha256(data).hexdigest() for name, data in self.sources.items()}

    def add_source(self, name, size, generator):
        data = generator.randbytes(size)
        self.sources[name] = data
        for folder in ("r8", "r4"):
            with open(os.path.join(self.www, folder, name), "wb") as f:
                f.write(data)

    def url(self, name, cut, rate="r8"):
        return f"http://127.0.0.1:{self.port}/{rate}/{name}?cut={cut}"

    def bytes_sent(self, cut):
        """Body bytes nginx sent for the cut's requests, by file name."""
        sent = {}
        with open(os.path.join(self.work, "access.log")) as log:
            for line in log:
                parts = line.split()
                if len(parts) == 3 and parts[0] == str(cut):
                    name = parts[1].rsplit("/", 1)[-1]
                    sent[name] = sent.get(name, 0) + int(parts[2])
        return sent

    def close(self):
        # Interrupted in the middle of a cut: its haul processes and its mount go first.
        for item in reversed(self.live):
            if isinstance(item, Disk):
                item.unmount()
            elif item.poll() is None:
                os.killpg(item.pid, signal.SIGKILL)
                item.wait()
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.wait()
        if not self.keep_work:
            shutil.rmtree(self.work, ignore_errors=True)


def self_test(run):
    """The two writers, each cut right after it returns: the careless one must lose, the careful one keep; and the
    careful one again with the cut armed before its last change, the sync of the folder: it must lose."""
    results = {}
    for careful in (False, True, "armed"):
        folder = tempfile.mkdtemp(dir=run.work, prefix="self.")
        backing = os.path.join(folder, "disk")
        os.makedirs(backing)
        disk = Disk(run.binary, run.mountpoint, backing)
        data = os.urandom(1 << 20)
        temporary = os.path.join(run.mountpoint, "f.tmp")
        final = os.path.join(run.mountpoint, "f")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(descriptor, data)
        if careful:
            os.fsync(descriptor)
        os.close(descriptor)
        os.rename(temporary, final)
        if careful:
            if careful == "armed":
                disk.arm(1, "")
            folder_descriptor = os.open(run.mountpoint, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(folder_descriptor)
            except OSError:
                pass  # the disk died before it
            os.close(folder_descriptor)
        disk.cut()
        disk.unmount()
        after = Disk(run.binary, run.mountpoint, disk.image, nodes=disk.image + ".nodes")
        try:
            with open(final, "rb") as f:
                results[careful] = f.read() == data
        except FileNotFoundError:
            results[careful] = False
        after.unmount()
    if results[False] or not results[True] or results["armed"]:
        raise SystemExit(f"powercut: the self-test failed: without fsync kept={results[False]}, "
                         f"with fsync, rename, fsync of the folder kept={results[True]}, cut armed before the fsync "
                         f"of the folder kept={results['armed']}; no other result counts")
    print("self-test: a rename without fsync is lost by a cut; fsync, rename, fsync of the folder is kept, and lost "
          "by a cut armed before the fsync of the folder")


class Cut:
    """One cut of one scenario: start, cut at a moment, remount, check, run again, check."""

    def __init__(self, run, number, scenario, rng):
        self.run, self.number, self.scenario, self.rng = run, number, scenario, rng
        self.folder = os.path.join(run.work, f"cut{number}")
        self.violations = []
        self.acknowledged, self.removed = set(), set()
        # Removals asked for, answered or not: one the cut interrupted may have taken effect unanswered.
        self.removal_asked = set()
        self.mnt = run.mountpoint
        self.state = os.path.join(self.mnt, "state")
        self.downloads = os.path.join(self.mnt, "dl")
        self.haul_log = open(os.path.join(run.work, f"cut{number}.haul.log"), "w")
        # giveback: the connections of its download, its id once known, and where the cut comes: in haul get's
        # hand-over of the user's file as it starts, or in haul rm's give-back after Ctrl-C.
        self.connections = rng.choice([1, 2]) if scenario == "giveback" else 1
        self.phase = rng.choice(["start", "remove"]) if scenario == "giveback" else None
        self.download = None

    def violation(self, text):
        self.violations.append(f"cut {self.number} ({self.scenario}): {text}")

    # MARK: What each scenario runs

    def files(self):
        """(name, rate, connections) of what the scenario downloads."""
        if self.scenario in ("single", "continue"):
            return [("one.bin", "r8", 1)]
        if self.scenario == "giveback":
            return [("one.bin", "r4", self.connections)]
        if self.scenario in ("segmented",):
            return [("seg.bin", "r4", 8)]
        if self.scenario == "commit":
            return [("seg.bin", "r4", 4)]
        if self.scenario == "batch":
            return [(f"s{i:03}.bin", "r8", 1) for i in range(120)]
        return [(f"d{i}.bin", "r8", 2) for i in range(10)]

    def command(self):
        haul = [self.run.haul]
        common = ["--state-dir", self.state]
        if self.scenario == "batch":
            listing = os.path.join(self.run.work, f"cut{self.number}.list")
            with open(listing, "w") as f:
                for name, rate, _ in self.files():
                    f.write(self.run.url(name, self.number, rate) + "\n")
            return haul + ["get", "-j", "16", "-i", listing, "-d", self.downloads, "--quiet"] + common
        name, rate, connections = self.files()[0]
        continuing = ["-c"] if self.scenario in ("continue", "giveback") else []
        return haul + ["get", self.run.url(name, self.number, rate), "-o", os.path.join(self.downloads, name),
                       "-x", str(connections), "--quiet"] + continuing + common

    def start(self):
        if self.scenario == "serve":
            return self.start_serve()
        process = subprocess.Popen(self.command(), stdout=self.haul_log, stderr=self.haul_log,
                                   start_new_session=True, cwd=self.run.work)
        self.run.live.append(process)
        return process

    def start_serve(self):
        process = subprocess.Popen(
            [self.run.haul, "serve", "--listen", "127.0.0.1:0", "--download-dir", self.downloads, "-j", "4",
             "--state-dir", self.state], stdout=self.haul_log, stderr=self.haul_log, start_new_session=True,
            cwd=self.run.work)
        self.run.live.append(process)
        deadline = time.monotonic() + 30
        serve_json = os.path.join(self.state, "serve.json")
        # A serve.json the cut left names the process before it: wait for this one's.
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"powercut: haul serve did not start (cut {self.number})")
            try:
                with open(serve_json) as f:
                    self.api = json.load(f)
                if self.api.get("pid") == process.pid:
                    break
            except (json.JSONDecodeError, OSError):
                pass
            time.sleep(0.01)
        return process

    def call(self, method, path, body=None):
        request = urllib.request.Request(
            self.api["url"].rstrip("/") + "/api/v1" + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": "Bearer " + self.api["token"], "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")

    def drive_serve(self, stop):
        """Adds, pauses, removes and moves, one request at a time, until the cut; records what was acknowledged."""
        ids = []
        try:
            for index, (name, rate, connections) in enumerate(self.files()):
                if stop.is_set():
                    return
                url = self.run.url(name, self.number, rate)
                if index % 2:
                    # haul add, through the daemon's socket: an id printed and exit 0 acknowledge it.
                    added = subprocess.run(
                        [self.run.haul, "add", url, "-d", self.downloads, "-x", str(connections),
                         "--state-dir", self.state],
                        capture_output=True, text=True, timeout=30, cwd=self.run.work)
                    if added.returncode == 0:
                        for line in added.stdout.split():
                            ids.append(line.strip())
                            self.acknowledged.add(line.strip())
                    continue
                status, answer = self.call("POST", "/downloads", {"url": url, "filename": name,
                                                                   "connections": connections})
                if status == 201:
                    for download in (answer if isinstance(answer, list) else [answer]):
                        ids.append(download["id"])
                        self.acknowledged.add(download["id"])
                action = self.rng.random()
                if len(ids) >= 3 and action < 0.2:
                    self.call("POST", f"/downloads/{ids[-2]}/pause")
                elif len(ids) >= 3 and action < 0.3:
                    victim = ids[-3]
                    self.removal_asked.add(victim)
                    status, _ = self.call("DELETE", f"/downloads/{victim}")
                    if status in (200, 204):
                        self.removed.add(victim)
                elif len(ids) >= 3 and action < 0.5:
                    self.call("POST", f"/downloads/{ids[-1]}/move", {"to": "top"})
        except (OSError, ValueError):
            return  # the cut came

    # MARK: Checks

    def check_after_cut(self):
        listing = subprocess.run([self.run.haul, "ls", "--json", "--state-dir", self.state],
                                 capture_output=True, text=True, timeout=60, cwd=self.run.work)
        if listing.returncode != 0:
            self.violation(f"the store does not open: {listing.stderr.strip()[:300]}")
            return
        rows = self.rows()
        present = {row["id"] for row in rows}
        for missing in sorted(self.acknowledged - self.removal_asked - present):
            self.violation(f"download {missing} was acknowledged with 201 and is gone")
        self.check_final_names(complete=False)
        for row in rows:
            self.check_checkpoint(row)
        if self.scenario in ("continue", "giveback"):
            self.check_handed_over(rows)
        if self.scenario == "giveback":
            self.check_given_back(rows)

    def check_handed_over(self, rows):
        """The user's first bytes of one.bin are still there: under its name, or the part file's it was moved to.
        Moved there, the store records the file as handed over from one.bin, counting the user's bytes at least: a
        cancel or a removal then gives them back, and a resume compares them."""
        mine = self.run.sources["one.bin"][:HANDED_OVER]
        for name in ("one.bin", "one.bin.part"):
            try:
                with open(os.path.join(self.downloads, name), "rb") as f:
                    if f.read(HANDED_OVER) != mine:
                        continue
            except FileNotFoundError:
                continue
            if name == "one.bin.part" and not any(row["handOver"] == 2 and held_prefix(row) >= HANDED_OVER
                                                  for row in rows):
                self.violation("one.bin.part holds the user's 2 MiB and no row records it as handed over from "
                               "one.bin, counting them: " + repr([(r["handOver"], held_prefix(r)) for r in rows]))
            return
        self.violation("the user's 2 MiB of one.bin, handed over with -c, are under neither its name nor the part "
                       "file's")

    def given_back(self):
        """Whether one.bin is a file given back: the start of its source, holding at least the user's bytes."""
        path = os.path.join(self.downloads, "one.bin")
        if not os.path.exists(path):
            return False
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            return size >= HANDED_OVER and f.read() == self.run.sources["one.bin"][:size]

    def check_given_back(self, rows):
        """Once the removal is stored (the download is gone), the user's file is back under its name."""
        if self.download is None or any(row["id"] == self.download for row in rows):
            return
        if os.path.exists(os.path.join(self.downloads, "one.bin.part")) or not self.given_back():
            self.violation("the removal of the -c download is stored, and one.bin is not back under its name as the "
                           "start of its source")

    def cancelled_unanswered(self, download, state):
        """Whether `download` is cancelled by a removal the cut interrupted before its answer: the removal cancels
        first and forgets after, so that is where it may have stopped."""
        return state == "cancelled" and download in self.removal_asked - self.removed

    def rows(self):
        path = os.path.join(self.state, "haul.sqlite")
        if not os.path.exists(path):
            return []
        connection = sqlite3.connect(path, timeout=10)
        connection.row_factory = sqlite3.Row
        try:
            return [dict(row) for row in connection.execute(
                "SELECT id, url, destination, state, durableOffset, segments, totalLength, handOver FROM download")]
        finally:
            connection.close()

    def source_of(self, url):
        return self.run.sources.get(url.split("?")[0].rsplit("/", 1)[-1])

    def check_checkpoint(self, row):
        source = self.source_of(row["url"])
        if source is None or not row["destination"]:
            return
        if row["state"] == "completed":
            return  # its file is checked by name
        ranges = []
        if row["segments"]:
            ranges = [(s["start"], s["offset"]) for s in json.loads(row["segments"]) if s["offset"] > s["start"]]
        elif row["durableOffset"] > 0:
            ranges = [(0, row["durableOffset"])]
        if not ranges:
            return
        part = row["destination"] + ".part"
        try:
            with open(part, "rb") as f:
                held = f.read()
        except FileNotFoundError:
            # Moved into place before its completed state was stored: the whole file under the final name (checked
            # there) is what the next run recognises as its own.
            if os.path.exists(row["destination"]) and sha(row["destination"]) == hashlib.sha256(source).hexdigest():
                return
            # Given back before the removal of its row was stored, or not yet moved when the row recorded its hand-over:
            # the next run finds it under its name.
            if self.scenario in ("continue", "giveback") and self.given_back():
                return
            self.violation(f"{row['id']}: the checkpoint counts {sum(e - s for s, e in ranges)} bytes of "
                           f"{part}, which is not there")
            return
        for start, end in ranges:
            if held[start:end] != source[start:end]:
                wrong = next((i for i in range(start, end) if i >= len(held) or held[i] != source[i]), start)
                self.violation(f"{row['id']}: the checkpoint counts bytes {start}-{end} of {part}; "
                               f"byte {wrong} is not the source's")

    def check_final_names(self, complete):
        """Every file not named .part is its source; with `complete`, every file of the scenario is there."""
        expected = {name for name, _, _ in self.files()}
        found = set()
        for folder, _, names in os.walk(self.downloads):
            for name in names:
                if name.endswith(".part"):
                    continue
                base = re.sub(r" \(\d+\)(\.[^.]*)?$", lambda m: m.group(1) or "", name)
                digest = self.run.digests.get(base)
                path = os.path.join(folder, name)
                if not complete and self.scenario == "continue" and name == "one.bin" and os.path.getsize(path) == \
                        HANDED_OVER and sha(path) == hashlib.sha256(self.run.sources[name][:HANDED_OVER]).hexdigest():
                    continue  # the user's own file, not yet handed over
                if not complete and self.scenario == "giveback" and name == "one.bin" and self.given_back():
                    continue  # the user's own file, not yet handed over, or given back
                if digest is None or sha(path) != digest:
                    self.violation(f"{name} is under a final name and is not its complete source")
                found.add(base)
        if complete:
            wanted = expected
            if self.scenario == "serve":
                kept = [r for r in self.rows() if not self.cancelled_unanswered(r["id"], r["state"])]
                wanted = {name for name, _, _ in self.files()
                          if any(r["url"].split("?")[0].endswith("/" + name) for r in kept)}
            for name in sorted(wanted - found):
                self.violation(f"after the rerun, {name} is not there")

    # MARK: The run

    def rerun(self):
        if self.scenario == "serve":
            process = self.start_serve()
            try:
                self.call("POST", "/resume-all")
                deadline = time.monotonic() + 90
                while time.monotonic() < deadline:
                    _, downloads = self.call("GET", "/downloads")
                    items = downloads["downloads"] if isinstance(downloads, dict) else downloads
                    if all(d["state"] in ("completed", "failed", "cancelled") for d in items):
                        break
                    time.sleep(0.1)
                for d in items:
                    if d["state"] != "completed" and not self.cancelled_unanswered(d["id"], d["state"]):
                        self.violation(f"after the rerun, {d['id']} is {d['state']}: {d.get('error')}")
                present = {d["id"] for d in items}
                for missing in sorted(self.acknowledged - self.removal_asked - present):
                    self.violation(f"after the rerun, acknowledged download {missing} is gone")
            finally:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=30)
        else:
            rows = self.rows() if self.scenario == "giveback" else []
            if self.download is None and rows:
                self.download = rows[0]["id"]
            if any(row["id"] == self.download for row in rows) and (self.phase == "start" or self.rng.random() < 0.5):
                # The removal the cut interrupted, again, or one of the download the cut stopped as it started: it
                # gives the file back. Otherwise haul get -c resumes it.
                removal = self.remove()
                if removal.returncode != 0:
                    self.violation(f"haul rm again exited {removal.returncode}: {removal.stderr.strip()[-400:]}")
                self.check_given_back(self.rows())
            result = subprocess.run(self.command(), stdout=self.haul_log, stderr=subprocess.PIPE, text=True,
                                    timeout=120, cwd=self.run.work)
            if result.returncode != 0:
                self.violation(f"the rerun exited {result.returncode}: {result.stderr.strip()[-400:]}")
        self.check_final_names(complete=True)

    def refetched(self):
        """Bytes fetched beyond each file's size, and the bound: one checkpoint per connection, per file."""
        sent = self.run.bytes_sent(self.number)
        extra, bound = 0, 0
        for name, rate, connections in self.files():
            if name not in sent:
                continue
            # What the server had to send: the whole file, but the user's bytes when they are continued.
            size = len(self.run.sources[name]) - (HANDED_OVER if self.scenario in ("continue", "giveback") else 0)
            extra += max(0, sent[name] - size)
            per_second = (8 if rate == "r8" else 4) * 1_000_000
            # One checkpoint interval of bytes a connection, and the 64 KiB each compares when it resumes.
            bound += connections * (int(per_second * CHECKPOINT_SECONDS) + (64 << 10))
            if self.scenario == "giveback" and connections > 1:
                # A file given back keeps only what is held from its start: the later connections' bytes go.
                bound += size
        self.bound = bound
        return extra, extra > bound

    def remove(self):
        return subprocess.run([self.run.haul, "rm", self.download, "--state-dir", self.state], capture_output=True,
                              text=True, timeout=60, cwd=self.run.work)

    def stop_and_remove(self, process, disk):
        """Ctrl-C (the download pauses), then haul rm with the cut armed before one of the changes it makes."""
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.violation("haul get did not stop within 30 s of Ctrl-C")
            return
        listing = subprocess.run([self.run.haul, "ls", "--json", "--state-dir", self.state], capture_output=True,
                                 text=True, timeout=60, cwd=self.run.work)
        if listing.returncode != 0:
            self.violation(f"haul ls after Ctrl-C exited {listing.returncode}: {listing.stderr.strip()[-400:]}")
            return
        self.download = next((download["id"] for download in json.loads(listing.stdout)), None)
        if self.download is None:
            return  # stopped before its row was stored
        # The give-back's changes come first: the part file's truncate and sync, its rename, the sync of its folder;
        # then the store's removal of the row (about ten writes and syncs).
        disk.arm(self.rng.randrange(1, 16), ".part")
        self.remove()

    def execute(self):
        os.makedirs(self.folder)
        backing = os.path.join(self.folder, "disk")
        os.makedirs(os.path.join(backing, "dl"))
        if self.scenario in ("continue", "giveback"):
            # On the disk before it mounts: the user's file, durable.
            with open(os.path.join(backing, "dl", "one.bin"), "wb") as f:
                f.write(self.run.sources["one.bin"][:HANDED_OVER])
        keep = self.rng.choice(["none", "none", "prefix", "subset"])
        cut_at = f"-wal:{self.rng.randrange(1, 40)}" if self.scenario == "commit" else None
        disk = Disk(self.run.binary, self.mnt, backing, keep=keep, seed=self.rng.randrange(1 << 30), cut_at=cut_at,
                    live=self.run.live)
        device = os.stat(self.mnt).st_dev
        if self.phase == "start":
            # From the hand-over's rename of the user's file on: the rename, the sync of its folder, the store's
            # record of it, the first writes.
            disk.arm(self.rng.randrange(1, 10), ".part")
        process = self.start()
        stop = threading.Event()
        driver = None
        if self.scenario == "serve":
            driver = threading.Thread(target=self.drive_serve, args=(stop,))
            driver.start()
        limit = {"single": 1.2, "segmented": 1.6, "batch": 1.5, "serve": 2.5, "commit": 2.0, "continue": 1.0,
                 "giveback": 0.7}[self.scenario]
        moment = time.monotonic() + (5 if self.phase == "start" else self.rng.uniform(0.02, limit))
        while time.monotonic() < moment and process.poll() is None and not disk.was_cut():
            time.sleep(0.002)
        if self.phase == "remove":
            self.stop_and_remove(process, disk)
        if self.scenario == "commit":
            # The file system cuts by itself at the chosen write; a run that wrote less is cut now.
            deadline = time.monotonic() + 5
            while process.poll() is None and not disk.was_cut() and time.monotonic() < deadline:
                time.sleep(0.002)
        disk.cut()
        stop.set()
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        if driver:
            driver.join()
        summary = disk.cut_summary()
        disk.unmount()
        if self.run.keep_work:
            shutil.copytree(disk.image, disk.image + ".as-cut", symlinks=True)
        after = Disk(self.run.binary, self.mnt, disk.image, nodes=disk.image + ".nodes", live=self.run.live)
        if os.stat(self.mnt).st_dev != device:
            # Haul compares the device and inode it recorded, as a disk back from a power cut keeps them.
            after.unmount()
            raise SystemExit("powercut: the remount got another device number; the results would not count")
        try:
            self.check_after_cut()
            self.rerun()
        finally:
            after.unmount()
        self.run.live.clear()
        extra, over = self.refetched()
        self.haul_log.close()
        if not self.run.keep_work and not self.violations:
            shutil.rmtree(self.folder, ignore_errors=True)
        return summary, extra, over


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cuts", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--haul", default=None)
    parser.add_argument("--scenarios", default="single,segmented,batch,serve,commit,continue,giveback")
    parser.add_argument("--keep-work", action="store_true")
    parser.add_argument("--verbose", action="store_true")
    arguments = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("powercut: mounting the file system needs root")
    haul = arguments.haul or os.path.join(
        subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True,
                       check=True).stdout.strip(), "haul")
    seed = arguments.seed if arguments.seed is not None else random.randrange(1 << 30)
    print(f"powercut: seed {seed}, haul {haul}")
    # SIGTERM (a timeout, CI giving up) ends the run as Ctrl-C does: its haul processes, mount and nginx go too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rng = random.Random(seed)
    scenarios = arguments.scenarios.split(",")
    run = Run(haul, arguments.keep_work)
    violations, over_bound, refetched = [], 0, []
    try:
        self_test(run)
        for number in range(1, arguments.cuts + 1):
            scenario = scenarios[(number - 1) % len(scenarios)]
            cut = Cut(run, number, scenario, random.Random(rng.randrange(1 << 30)))
            summary, extra, over = cut.execute()
            refetched.append(extra)
            over_bound += int(over)
            violations += cut.violations
            if over:
                print(f"cut {number} {scenario}: over bound: fetched again {extra / MiB:.2f} MiB, bound "
                      f"{cut.bound / MiB:.2f} MiB; {summary}", flush=True)
            if arguments.verbose or cut.violations:
                acknowledged = f"; {len(cut.acknowledged)} adds acknowledged" if scenario == "serve" else ""
                print(f"cut {number} {scenario}: {summary}; refetched {extra / MiB:.2f} MiB{acknowledged}"
                      + "".join("\n  " + v for v in cut.violations), flush=True)
    finally:
        run.close()
    mean = sum(refetched) / len(refetched) / MiB if refetched else 0
    most = max(refetched) / MiB if refetched else 0
    print(f"cuts {len(refetched)}, violations {len(violations)}, over bound {over_bound}, "
          f"refetched per cut mean {mean:.2f} MiB, max {most:.2f} MiB")
    sys.exit(1 if violations else 0)


if __name__ == "__main__":
    main()
