#!/usr/bin/env python3
"""The web page in a real browser: Debian's chromium through chromium-driver and python3-selenium, against a real
`haul serve` and a real nginx. Run by .ci/browser-test (which builds haul and finds the binary):

    /usr/bin/python3 Tests/browser/page_test.py HAUL_BINARY [SCREENSHOT.png]

Every step waits for what it expects with a deadline (WebDriverWait polls); nothing sleeps to synchronise. One
step measures: after a pause, the daemon's received bytes must stay the same over a second of wall time.
Exits non-zero on the first failed expectation, naming it."""
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import testnginx  # noqa: E402
from testnginx import free_port  # noqa: E402
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException, TimeoutException
from selenium.webdriver.chrome.service import Service as ChromeService
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

haul = sys.argv[1]
screenshot = sys.argv[2] if len(sys.argv) > 2 else None
work = tempfile.mkdtemp(prefix="haul-browser.")
os.chmod(work, 0o755)  # nginx's workers (another user when run as root) read www/ inside it
processes = []
steps = 0


def step(text):
    global steps
    steps += 1
    print(f"  {steps:2}. {text}", flush=True)


def start_nginx():
    """nginx serving www/: /files/ at full speed, /slow/ at 1 MiB/s (slow enough to watch, pause and resume)."""
    www = os.path.join(work, "www")
    os.makedirs(os.path.join(www, "files"))
    os.makedirs(os.path.join(www, "slow"))
    with open(os.path.join(www, "files", "small.bin"), "wb") as f:
        f.write(os.urandom(200_000))
    with open(os.path.join(www, "slow", "big.bin"), "wb") as f:
        f.write(os.urandom(6 * 1024 * 1024))
    with open(os.path.join(www, "files", "<img src=x onerror=alert(1)>.bin"), "wb") as f:
        f.write(b"not a picture\n")
    # /expired/ answers as an S3 presigned URL past its expiry does.
    expired = ("location /expired/ { default_type application/xml; return 403 '<?xml version=\"1.0\"?><Error>"
               "<Code>AccessDenied</Code><Message>Request has expired</Message></Error>'; }")
    # /busy/ is a server that asks to be tried again in a minute.
    busy = "location /busy/ { add_header Retry-After 60 always; return 503; }"
    return testnginx.start_nginx(work, processes, "files/small.bin", locations=expired + "\n" + busy)


def start_haul(port):
    state = os.path.join(work, "state")
    serve = subprocess.Popen([haul, "serve", "--listen", f"127.0.0.1:{port}", "--state-dir", state,
                              "--download-dir", os.path.join(work, "downloads"), "--log-level", "error"])
    processes.append(serve)
    info = os.path.join(state, "serve.json")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if os.path.exists(info):
            with open(info) as f:
                text = f.read()
            if text:
                return serve, json.loads(text)
        time.sleep(0.05)
    raise SystemExit("haul serve did not start")


def api(info, path, method="GET"):
    request = urllib.request.Request(info["url"] + "/api/v1" + path, method=method,
                                     headers={"Authorization": "Bearer " + info["token"]})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"null")


def api_post(info, path, body, method="POST"):
    request = urllib.request.Request(info["url"] + "/api/v1" + path, method=method, data=json.dumps(body).encode(),
                                     headers={"Authorization": "Bearer " + info["token"],
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request) as response:
        return json.loads(response.read() or b"null")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    os.makedirs(os.path.join(work, "downloads"))
    nginx_port = start_nginx()
    haul_port = free_port()
    serve, info = start_haul(haul_port)
    base = info["url"]

    options = webdriver.ChromeOptions()
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for argument in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,900"]:
        options.add_argument(argument)
    chromium = shutil.which("chromium")
    if chromium:
        options.binary_location = chromium
    service = ChromeService(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    driver = webdriver.Chrome(options=options, service=service)
    wait = WebDriverWait(driver, 30, poll_frequency=0.05)

    def row(name):
        """The row whose name is `name` (None when not drawn)."""
        for element in driver.find_elements(By.CSS_SELECTOR, "#list .row"):
            if element.is_displayed() and element.find_element(By.CSS_SELECTOR, ".name").text == name:
                return element
        return None

    def row_state(name):
        element = row(name)
        return element.find_element(By.CSS_SELECTOR, ".state").text if element else None

    def until(condition, what, timeout=30):
        # The list is drawn again as events arrive: an element found a moment ago may be gone when it is read, which
        # is a poll to do again, not a failure.
        try:
            return WebDriverWait(
                driver, timeout, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
            ).until(lambda _: condition())
        except TimeoutException:
            console = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
            raise SystemExit(f"FAILED: {what() if callable(what) else what}" + "".join("\n  console: " + m for m in console))

    def expect(condition, what):
        if not condition:
            raise SystemExit(f"FAILED: {what}")

    def focus_by_tab(predicate, what, limit=60):
        """Presses Tab until the focused element satisfies `predicate` (a JS expression on `e`)."""
        for _ in range(limit):
            if driver.execute_script(f"const e = document.activeElement; return !!(e && ({predicate}));"):
                return
            webdriver.ActionChains(driver).send_keys(Keys.TAB).perform()
        raise SystemExit(f"FAILED: Tab never reached {what}")

    try:
        step("the printed URL signs in: the list shows, live")
        driver.get(base + "/?token=" + info["token"])
        until(lambda: driver.find_element(By.ID, "app").is_displayed(), "the app shows after signing in")
        expect(driver.current_url.rstrip("/") == base, f"the token is not left in the address: {driver.current_url}")
        until(lambda: driver.find_element(By.ID, "connection").text == "Live", "the stream is live")
        driver.execute_script("window.__notReloaded = true;")

        step("add two URLs through the dialog; their rows appear")
        driver.find_element(By.ID, "add-open").click()
        urls = driver.find_element(By.ID, "add-urls")
        urls.send_keys(f"http://127.0.0.1:{nginx_port}/slow/big.bin\nhttp://127.0.0.1:{nginx_port}/files/small.bin")
        driver.find_element(By.ID, "add-submit").click()
        until(lambda: not driver.find_element(By.ID, "add-dialog").is_displayed(), "the dialog closes")
        until(lambda: row("big.bin") is not None and row("small.bin") is not None, "both rows appear")
        for element in driver.find_elements(By.CSS_SELECTOR, "#list .row"):
            if element.is_displayed():
                ident = element.get_attribute("data-download-id")
                expect(ident and api(info, "/downloads/" + ident)["url"].endswith(
                    element.find_element(By.CSS_SELECTOR, ".name").text), "each row's id is its download's")

        step("progress rises without a reload")
        first = until(lambda: (v := row("big.bin").find_element(By.TAG_NAME, "progress").get_attribute("value"))
                      and float(v) > 0 and float(v), "big.bin's progress moves")
        until(lambda: float(row("big.bin").find_element(By.TAG_NAME, "progress").get_attribute("value")) > first,
              "big.bin's progress rises")
        until(lambda: row_state("small.bin") == "Completed", "small.bin completes")
        runner = api(info, "/downloads/" + row("big.bin").get_attribute("data-download-id")).get("worker")
        expect(runner, "a running download names the worker that runs it")
        until(lambda: f" on {runner}" in row("big.bin").text, f"big.bin's row shows it runs on {runner}")

        step("pause with the keyboard: the state shows Paused and the daemon stops receiving")
        big_id = row("big.bin").get_attribute("data-download-id")
        focus_by_tab(f"e.dataset.action === 'pause' && e.closest('.row').dataset.downloadId === '{big_id}'",
                     "big.bin's Pause button")
        webdriver.ActionChains(driver).send_keys(Keys.SPACE).perform()
        until(lambda: row_state("big.bin") == "Paused", "big.bin shows Paused")
        received = api(info, "/downloads/" + big_id)["receivedBytes"]
        time.sleep(1)  # a measurement over wall time, not a synchronisation
        expect(api(info, "/downloads/" + big_id)["receivedBytes"] == received, "nothing more arrives while paused")
        expect(0 < received < 6 * 1024 * 1024, f"paused part way ({received} bytes)")

        step("resume with the keyboard; it completes, byte-identical")
        focus_by_tab(f"e.dataset.action === 'resume' && e.closest('.row').dataset.downloadId === '{big_id}'",
                     "big.bin's Resume button")
        webdriver.ActionChains(driver).send_keys(Keys.ENTER).perform()
        until(lambda: row_state("big.bin") == "Completed", "big.bin completes after resuming", timeout=60)
        expect(sha256(os.path.join(work, "downloads", "big.bin")) ==
               sha256(os.path.join(work, "www", "slow", "big.bin")), "big.bin is byte-identical")
        expect(sha256(os.path.join(work, "downloads", "small.bin")) ==
               sha256(os.path.join(work, "www", "files", "small.bin")), "small.bin is byte-identical")

        step("the detail panel shows the download's fields; Escape closes it")
        row("big.bin").find_element(By.CSS_SELECTOR, ".name").click()
        until(lambda: driver.find_element(By.ID, "detail").is_displayed(), "the panel opens")
        expect(driver.find_element(By.ID, "detail-title").text == "big.bin", "the panel names the download")
        fields = driver.find_element(By.ID, "detail-fields").text
        expect(f"/slow/big.bin" in fields and "6291456 bytes" in fields, f"the fields are shown: {fields[:200]}")
        expect("Worker" not in fields and api(info, "/downloads/" + big_id)["worker"] is None,
               "a completed download runs on no worker")
        webdriver.ActionChains(driver).send_keys(Keys.ESCAPE).perform()
        until(lambda: not driver.find_element(By.ID, "detail").is_displayed(), "Escape closes the panel")

        step("a download from two servers: the detail panel lists each with its state and speed, live")
        mirrored = api_post(info, "/downloads", {
            "url": f"http://127.0.0.1:{nginx_port}/slow/big.bin", "filename": "mirrored.bin",
            "mirrors": [f"http://127.0.0.1:{nginx_port}/slow/big.bin?mirror=2"], "connections": 2,
            "minSplitSize": 1048576})["id"]
        until(lambda: row("mirrored.bin") is not None, "the mirrored download's row appears")
        row("mirrored.bin").find_element(By.CSS_SELECTOR, ".name").click()
        until(lambda: driver.find_element(By.ID, "detail-servers").is_displayed(), "the Servers list shows")
        # Read in one script: the list is redrawn as progress arrives, so elements found first may be gone.
        servers = lambda: driver.execute_script(
            "return [...document.querySelectorAll('#detail-mirrors li')].map((e) => e.textContent);")
        until(lambda: len(servers()) == 2 and all(": active, " in text and "/s" in text for text in servers()),
              "both servers show active, with their connections and speed", timeout=60)
        expect(servers()[1].startswith(f"http://127.0.0.1:{nginx_port}/slow/big.bin?mirror=2"),
               f"the mirror is listed second: {servers()}")
        webdriver.ActionChains(driver).send_keys(Keys.ESCAPE).perform()
        until(lambda: api(info, "/downloads/" + mirrored)["state"] == "completed", "the mirrored download completes",
              timeout=60)
        expect(sha256(os.path.join(work, "downloads", "mirrored.bin")) ==
               sha256(os.path.join(work, "www", "slow", "big.bin")), "mirrored.bin is byte-identical")

        step("a link that expired: the panel says so, and Replace link finishes it from a new link")
        expired = api_post(info, "/downloads", {
            "url": f"http://127.0.0.1:{nginx_port}/expired/big.bin", "filename": "renewed.bin"})["id"]
        until(lambda: api(info, "/downloads/" + expired)["state"] == "failed", "the expired link fails")
        until(lambda: row("renewed.bin") is not None, "its row appears")
        row("renewed.bin").find_element(By.CSS_SELECTOR, ".name").click()
        until(lambda: driver.find_element(By.ID, "detail-expired").is_displayed(), "the panel says the link expired")
        field = driver.find_element(By.ID, "detail-url")
        field.send_keys(f"http://127.0.0.1:{nginx_port}/files/small.bin?signature=fresh")
        field.send_keys(Keys.ENTER)
        until(lambda: api(info, "/downloads/" + expired)["state"] == "completed", "it completes from the new link")
        expect(api(info, "/downloads/" + expired)["url"].endswith("/files/small.bin?signature=fresh"),
               "the download has the new link")
        until(lambda: not driver.find_element(By.ID, "detail-link").is_displayed(),
              "a completed download has no link to replace")
        webdriver.ActionChains(driver).send_keys(Keys.ESCAPE).perform()

        step("select two rows with a click and a shift-click: the bulk bar counts them")
        row("big.bin").find_element(By.CSS_SELECTOR, ".select").click()
        webdriver.ActionChains(driver).key_down(Keys.SHIFT).click(
            row("small.bin").find_element(By.CSS_SELECTOR, ".select")).key_up(Keys.SHIFT).perform()
        until(lambda: driver.find_element(By.ID, "bulk-count").text == "2 selected", "two are selected")
        driver.find_element(By.ID, "bulk-clear").click()
        until(lambda: not driver.find_element(By.ID, "bulk").is_displayed(), "the selection clears")

        step("drag a row onto another: it moves before it")
        order = lambda: [r.find_element(By.CSS_SELECTOR, ".name").text for r in sorted(
            (r for r in driver.find_elements(By.CSS_SELECTOR, "#list .row") if r.is_displayed()),
            key=lambda r: r.location["y"])]
        expect(order()[:2] == ["big.bin", "small.bin"], f"the order before: {order()}")
        # Selenium cannot drive HTML5 drag and drop; the test sends the browser's own drag events with one DataTransfer.
        driver.execute_script("""
            const [source, target] = arguments;
            const data = new DataTransfer();
            const box = target.getBoundingClientRect();
            const at = { bubbles: true, cancelable: true, dataTransfer: data, clientX: box.left + 5, clientY: box.top + 5 };
            source.dispatchEvent(new DragEvent('dragstart', at));
            target.dispatchEvent(new DragEvent('dragover', at));
            target.dispatchEvent(new DragEvent('drop', at));
            source.dispatchEvent(new DragEvent('dragend', at));""", row("small.bin"), row("big.bin"))
        until(lambda: order()[:2] == ["small.bin", "big.bin"], "small.bin is now first")
        small_id = row("small.bin").get_attribute("data-download-id")
        expect([d["id"] for d in api(info, "/downloads")["downloads"]][0] == small_id, "the daemon's order too")

        step("the global settings change from the page: downloads at once and the rate limit")
        concurrent = driver.find_element(By.ID, "setting-concurrent")
        concurrent.clear()
        concurrent.send_keys("2" + Keys.TAB)
        until(lambda: api(info, "/settings")["maxConcurrentDownloads"] == 2, "at once is 2")
        limit = driver.find_element(By.ID, "setting-limit")
        limit.clear()
        limit.send_keys("512" + Keys.TAB)
        until(lambda: api(info, "/settings").get("limitRate") == 512 * 1024, "the limit is 512 KiB/s")
        limit.clear()
        limit.send_keys(Keys.TAB)
        until(lambda: "limitRate" not in api(info, "/settings"), "no limit again")

        step("the schedule's rule in force shows beside the settings, live, and goes when the schedule is removed")
        rule = driver.find_element(By.ID, "schedule-in-force")
        until(lambda: not rule.is_displayed(), "no rule shows without a schedule")
        api_post(info, "/settings", {"schedule": ["00:00-24:00 rate=64M"]}, method="PATCH")
        until(lambda: rule.is_displayed() and rule.text == "Schedule: 00:00-24:00 rate=64M", "the rule shows")
        api_post(info, "/settings", {"schedule": []}, method="PATCH")
        until(lambda: not rule.is_displayed(), "the rule is gone")

        step("the sort rules show beside the settings; a download they match lands in its folder")
        sorting = driver.find_element(By.ID, "sort-rules")
        until(lambda: not sorting.is_displayed(), "no rules show without any")
        api_post(info, "/settings", {"sortRules": ["small*.bin=Sorted/Small", "video/*=Videos"]}, method="PATCH")
        until(lambda: sorting.is_displayed() and sorting.text == "Sorting: small*.bin \u2192 Sorted/Small; video/* \u2192 Videos",
              lambda: f"the rules show: {sorting.text!r}")
        sorted_id = api_post(info, "/downloads", {"url": f"http://127.0.0.1:{nginx_port}/files/small.bin?sorted"})["id"]
        until(lambda: api(info, "/downloads/" + sorted_id)["state"] == "completed", "the sorted download completes")
        expect(os.path.exists(os.path.join(work, "downloads", "Sorted", "Small", "small.bin")),
               "it is in the rule's folder")
        api_post(info, "/settings", {"sortRules": []}, method="PATCH")
        until(lambda: not sorting.is_displayed(), "the rules are gone")
        api(info, "/downloads/" + sorted_id, method="DELETE")

        step("remove a completed one (keeping its file)")
        row("small.bin").find_element(By.CSS_SELECTOR, "button[data-action=remove]").click()
        wait.until(expected_conditions.alert_is_present()).accept()  # remove it
        wait.until(expected_conditions.alert_is_present()).dismiss()  # but not its file
        until(lambda: row("small.bin") is None, "small.bin's row goes")
        expect(os.path.exists(os.path.join(work, "downloads", "small.bin")), "the file stays")

        step("a busy server (503, Retry-After: 60): the row counts down to the retry with the error, no connection")
        busy = api_post(info, "/downloads", {"url": f"http://127.0.0.1:{nginx_port}/busy/later.bin"})
        until(lambda: (row_state("later.bin") or "").startswith("Retrying in "),
              lambda: f"later.bin waits to retry: {row_state('later.bin')}")
        shown = row("later.bin")
        text = row_state("later.bin")
        expect(text == "Retrying in 1 min 0 s" or (text.endswith(" s") and 50 <= int(text.split()[2]) <= 59), text)
        expect("HTTP 503" in shown.find_element(By.CSS_SELECTOR, ".error").text, "the error shows")
        expect(shown.find_element(By.CSS_SELECTOR, ".connections").text == "", "no connection is shown while it waits")
        api(info, "/downloads/" + busy["id"], method="DELETE")
        until(lambda: row("later.bin") is None, "later.bin's row goes")

        step("add with the keyboard alone: a file named like HTML shows as text and runs nothing")
        driver.find_element(By.ID, "search").click()
        focus_by_tab("e.id === 'add-open'", "the Add button")
        webdriver.ActionChains(driver).send_keys(Keys.ENTER).perform()
        until(lambda: driver.switch_to.active_element.get_attribute("id") == "add-urls", "the URL field has focus")
        hostile = f"http://127.0.0.1:{nginx_port}/files/%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E.bin"
        webdriver.ActionChains(driver).send_keys(hostile).perform()
        focus_by_tab("e.id === 'add-submit'", "the dialog's Add button")
        webdriver.ActionChains(driver).send_keys(Keys.ENTER).perform()
        until(lambda: any("onerror" in e.text for e in driver.find_elements(By.CSS_SELECTOR, "#list .row .name")),
              "the hostile name shows as text")
        expect(not driver.find_elements(By.CSS_SELECTOR, "#list img"), "no element was made from the name")
        try:
            driver.switch_to.alert
            raise SystemExit("FAILED: the name ran a script")
        except NoAlertPresentException:
            pass

        if screenshot:
            driver.save_screenshot(screenshot)

        step("paste 500 URLs, three of them invalid: the valid ones are added and the invalid lines named")
        before = len(api(info, "/downloads")["downloads"])
        lines = [f"http://127.0.0.1:{nginx_port}/files/small.bin?paste={i}" for i in range(497)]
        lines[10:10] = ["not a url"]
        lines[200:200] = ["gopher://127.0.0.1/x.bin"]
        lines[400:400] = ["http://"]
        driver.find_element(By.ID, "add-open").click()
        driver.execute_script("""
            const field = document.getElementById('add-urls');
            field.value = arguments[0];
            field.dispatchEvent(new Event('input', { bubbles: true }));""", "\n".join(lines))
        driver.find_element(By.ID, "add-paused").click()
        driver.find_element(By.ID, "add-submit").click()
        until(lambda: driver.find_element(By.ID, "add-errors").text.count("Line ") == 3, "three lines are named")
        errors = driver.find_element(By.ID, "add-errors").text
        expect("Line 11 (not a url)" in errors and "Line 201 (gopher://" in errors and "Line 401 (http://)" in errors,
               f"the errors name the lines: {errors}")
        expect(len(api(info, "/downloads")["downloads"]) == before + 497, "the 497 valid ones are added")
        driver.find_element(By.ID, "add-cancel").click()
        until(lambda: not driver.find_element(By.ID, "add-dialog").is_displayed(), "the dialog closes")

        step("filters: Completed shows the completed ones only, with its count; All shows every one again")
        completed = sum(1 for d in api(info, "/downloads")["downloads"] if d["state"] == "completed")
        button = driver.find_element(By.CSS_SELECTOR, "#filters button[data-filter=completed]")
        expect(button.find_element(By.CSS_SELECTOR, ".count").text == f"({completed})", "the count is the daemon's")
        button.click()
        until(lambda: all(r.find_element(By.CSS_SELECTOR, ".state").text == "Completed"
                          for r in driver.find_elements(By.CSS_SELECTOR, "#list .row") if r.is_displayed()),
              "only completed rows show")
        expect(button.get_attribute("aria-pressed") == "true", "the filter says it is on")
        driver.find_element(By.CSS_SELECTOR, "#filters button[data-filter=all]").click()
        until(lambda: row("big.bin") is not None, "All shows every download again")

        step("dark: the page follows prefers-color-scheme")
        light = driver.execute_script("return getComputedStyle(document.documentElement).backgroundColor")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        dark = driver.execute_script("return getComputedStyle(document.documentElement).backgroundColor")
        driver.execute_cdp_cmd("Emulation.setEmulatedMedia",
                               {"features": [{"name": "prefers-color-scheme", "value": "light"}]})
        expect(light != dark, f"the background changes with the scheme ({light} / {dark})")

        step("360 px wide: nothing overflows sideways and the buttons stay reachable")
        driver.set_window_size(360, 800)
        until(lambda: driver.execute_script(
            "return document.documentElement.scrollWidth <= window.innerWidth"), "the page fits 360 px")
        expect(driver.find_element(By.ID, "add-open").is_displayed(), "Add is visible")
        shown = [r for r in driver.find_elements(By.CSS_SELECTOR, "#list .row") if r.is_displayed()]
        expect(shown and shown[0].find_element(By.CSS_SELECTOR, "button[data-action=remove]").is_displayed(),
               "a row's buttons are visible")
        driver.set_window_size(1280, 900)

        step("restart the daemon: the page reconnects and the list comes back without a reload")
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=10)
        until(lambda: driver.find_element(By.ID, "connection").text == "Reconnecting…", "the page says reconnecting")
        serve, info = start_haul(haul_port)
        until(lambda: driver.find_element(By.ID, "connection").text == "Live", "the stream is live again")
        until(lambda: row("big.bin") is not None and row_state("big.bin") == "Completed", "the list is back")
        expect(driver.execute_script("return window.__notReloaded === true;"), "the page was not reloaded")

        step("a wrong token shows the token field, never the data")
        driver.delete_all_cookies()
        driver.get(base + "/?token=wrong")
        until(lambda: driver.find_element(By.ID, "token").is_displayed(), "the token field shows")
        expect(not driver.find_element(By.ID, "app").is_displayed(), "the list is hidden")
        expect("not this daemon's" in driver.find_element(By.ID, "signin-message").text, "the message says why")
        expect(not driver.find_elements(By.CSS_SELECTOR, "#list .row[data-download-id]:not([hidden])")
               or all(not e.is_displayed() for e in driver.find_elements(By.CSS_SELECTOR, "#list .row")),
               "no download is shown")

        step("signing in through the form")
        driver.find_element(By.ID, "token").send_keys(info["token"] + Keys.ENTER)
        until(lambda: driver.find_elements(By.ID, "app") and driver.find_element(By.ID, "app").is_displayed(),
              lambda: f"the app shows after the form (at {driver.current_url}: {driver.page_source[:300]})")
        until(lambda: row("big.bin") is not None, "the list shows after the form")

        step("the detail panel changes the priority and the download's speed limit")
        paused = next(r for r in driver.find_elements(By.CSS_SELECTOR, "#list .row")
                      if r.is_displayed() and r.find_element(By.CSS_SELECTOR, ".state").text == "Paused")
        big = paused.get_attribute("data-download-id")
        paused.find_element(By.CSS_SELECTOR, ".name").click()
        until(lambda: driver.find_element(By.ID, "detail").is_displayed(), "the panel opens")
        from selenium.webdriver.support.ui import Select
        Select(driver.find_element(By.ID, "detail-priority")).select_by_value("low")
        until(lambda: api(info, "/downloads/" + big)["priority"] == "low", "the priority is low")
        limit = driver.find_element(By.ID, "detail-limit")
        limit.send_keys("100" + Keys.TAB)
        until(lambda: api(info, "/downloads/" + big).get("limitRate") == 100 * 1024, "its limit is 100 KiB/s")
        expect("not known yet" in driver.find_element(By.ID, "detail-segments-text").text, "the segment map's text")
        driver.find_element(By.ID, "detail-close").click()

        step("bulk: select the pasted downloads' first rows and resume them, then pause all and resume all")
        pasted = [r for r in driver.find_elements(By.CSS_SELECTOR, "#list .row")
                  if r.is_displayed() and r.find_element(By.CSS_SELECTOR, ".state").text == "Paused"]
        expect(len(pasted) >= 2, "paused rows are shown")
        ids = [r.get_attribute("data-download-id") for r in pasted[:2]]
        pasted[0].find_element(By.CSS_SELECTOR, ".select").click()
        webdriver.ActionChains(driver).key_down(Keys.SHIFT).click(
            pasted[1].find_element(By.CSS_SELECTOR, ".select")).key_up(Keys.SHIFT).perform()
        driver.find_element(By.ID, "bulk-resume").click()
        until(lambda: all(api(info, "/downloads/" + i)["state"] != "paused" for i in ids), "the two resume")
        driver.find_element(By.ID, "bulk-clear").click()
        driver.find_element(By.ID, "pause-all").click()
        until(lambda: all(d["state"] not in ("queued", "running") for d in api(info, "/downloads")["downloads"]),
              "pause all leaves nothing queued or running")
        driver.find_element(By.ID, "resume-all").click()
        until(lambda: all(d["state"] != "paused" for d in api(info, "/downloads")["downloads"]),
              "resume all leaves nothing paused", timeout=60)

        step("clear finished forgets the completed downloads; their files stay")
        until(lambda: all(d["state"] == "completed" for d in api(info, "/downloads")["downloads"]),
              lambda: "every download completes; these did not: " + "; ".join(
                  f'{d.get("filename") or d["url"]} {d["state"]} {(d.get("error") or {}).get("message", "")}'
                  for d in api(info, "/downloads")["downloads"] if d["state"] != "completed")[:1500], timeout=90)
        driver.find_element(By.ID, "clear-finished").click()
        until(lambda: not api(info, "/downloads")["downloads"], "the list is empty")
        until(lambda: driver.find_element(By.ID, "empty").is_displayed(), "the page says so")
        expect(os.path.exists(os.path.join(work, "downloads", "big.bin")), "big.bin stays")

        step("bulk pause of one running and two queued downloads: the queued ones stop first, so neither starts")
        api_post(info, "/settings", {"maxConcurrentDownloads": 1}, method="PATCH")
        held = [api_post(info, "/downloads", {"url": f"http://127.0.0.1:{nginx_port}/slow/big.bin?bulk={i}",
                                              "filename": f"bulk{i}.bin"})["id"] for i in range(3)]
        until(lambda: api(info, "/downloads/" + held[0])["receivedBytes"] > 0, "the first runs")
        until(lambda: all(row(f"bulk{i}.bin") is not None for i in range(3)), "the three rows show")
        row("bulk0.bin").find_element(By.CSS_SELECTOR, ".select").click()
        webdriver.ActionChains(driver).key_down(Keys.SHIFT).click(
            row("bulk2.bin").find_element(By.CSS_SELECTOR, ".select")).key_up(Keys.SHIFT).perform()
        until(lambda: driver.find_element(By.ID, "bulk-count").text == "3 selected", "the three are selected")
        driver.find_element(By.ID, "bulk-pause").click()
        until(lambda: all(api(info, "/downloads/" + i)["state"] == "paused" for i in held), "the three pause")
        for i in held[1:]:
            download = api(info, "/downloads/" + i)
            expect(download["receivedBytes"] == 0 and download.get("totalBytes") is None,
                   f"{download['path'] or download['url']} was never started: {download}")
        expect(not os.path.exists(os.path.join(work, "downloads", "bulk1.bin.part")), "no part file for the second")
        driver.find_element(By.ID, "bulk-clear").click()
        for i in held:
            api(info, "/downloads/" + i + "?deleteFile=true", method="DELETE")

        step("5,000 downloads and 16 running: measured; only the rows in view exist, each showing its own download")
        api_post(info, "/settings", {"maxConcurrentDownloads": 16}, method="PATCH")
        small = f"http://127.0.0.1:{nginx_port}/files/small.bin"
        names = {}
        for start in range(0, 5000, 1000):
            added = api_post(info, "/downloads", [
                {"url": f"{small}?n={i}", "filename": f"p-{i:04}.bin", "paused": True}
                for i in range(start, start + 1000)])
            names.update({d["id"]: d["path"].rsplit("/", 1)[-1] for d in added["downloads"]})
        running = api_post(info, "/downloads", [
            {"url": f"http://127.0.0.1:{nginx_port}/slow/big.bin?r={i}", "filename": f"r-{i:02}.bin"}
            for i in range(16)])
        names.update({d["id"]: d["path"].rsplit("/", 1)[-1] for d in running["downloads"]})
        # The page names a download by its file, or by the URL's last path segment until the file is known.
        names.update({d["id"]: d["path"].rsplit("/", 1)[-1] if d.get("path") else urllib.parse.unquote(
            urllib.parse.urlsplit(d["url"]).path.rsplit("/", 1)[-1]) for d in api(info, "/downloads")["downloads"]
            if d["id"] not in names})
        driver.get(base + "/")
        until(lambda: driver.execute_script("return performance.getEntriesByName('haul-first-render').length") > 0,
              "the list renders")
        first_render = driver.execute_script("return performance.getEntriesByName('haul-first-render')[0].startTime")
        expect(driver.execute_script("return PerformanceObserver.supportedEntryTypes.includes('longtask')"),
               "the browser reports long tasks")
        driver.execute_script("""
            window.haulLongTasks = [];
            new PerformanceObserver((list) => {
                for (const entry of list.getEntries()) window.haulLongTasks.push([entry.startTime, entry.duration]);
            }).observe({ type: "longtask", buffered: true });""")
        until(lambda: api(info, "/stats")["counts"]["running"] >= 8, "downloads run")
        mismatches = []
        for position in [0, 40_000, 200_000, 120_000, 419_000, 1_000, 300_000]:
            driver.execute_script(f"document.getElementById('viewport').scrollTop = {position};")
            # Rows are rebound in the same frame as the scroll: read what the page shows after it.
            shown = driver.execute_script("""
                return new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => resolve(
                    [...document.querySelectorAll('#list .row:not([hidden])')].map(
                        (r) => [r.dataset.downloadId, r.querySelector('.name').textContent])))));""")
            expect(len(shown) > 0, f"rows are shown at {position}")
            mismatches += [(ident, name) for ident, name in shown if names.get(ident) != name]
        expect(not mismatches, f"every row shows its own download: {mismatches[:3]}")
        rows = driver.execute_script("return document.querySelectorAll('#list .row').length")
        expect(rows < 60, f"only the rows in view exist ({rows} for {len(names):,} downloads)")
        time.sleep(5)  # the measurement window: five seconds of progress from the running downloads
        tasks = driver.execute_script("return window.haulLongTasks")
        loading = [duration for start, duration in tasks if start < first_render]
        streaming = [duration for start, duration in tasks if start >= first_render]
        print(f"      {len(names):,} downloads: first render {first_render:.0f} ms after navigation "
              f"(tasks over 50 ms before it: {', '.join(f'{d:.0f} ms' for d in loading) or 'none'}); "
              f"{rows} row elements; while 16 ran for 5 s: {len(streaming)} tasks over 50 ms"
              + (f", the longest {max(streaming):.0f} ms" if streaming else ""), flush=True)
        print(f"browser test: {steps} steps passed")
    finally:
        driver.quit()


try:
    main()
finally:
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
    shutil.rmtree(work, ignore_errors=True)
