#!/usr/bin/env python3
"""The dashboard of `ddpx serve` in a real headless browser.

Starts the built service on a free loopback port with a fresh state folder, submits a real
training job over HTTP, and drives the page in Debian's chromium through chromium-driver and
Selenium (PyPI): sign-in, the jobs table, the job's live curves, device use, the Stop button,
the API's error for a wrong token, and the page without Chart.js.

Usage: dashboard_test.py PATH/TO/ddpx   (ctest runs it with the build's Python)
Exit 77 (a skip for ctest) when chromium or chromedriver is missing. With
DDPX_DASHBOARD_SCREENSHOT=FILE.png it saves the page with the running job there.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

try:
    from selenium import webdriver
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # main() says what to install
    webdriver = None

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
DDPX = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else ""
WAIT_S = 60  # the longest wait for the page to show something
# Two ranks training on Fashion-MNIST, an epoch about every half second for minutes: the test
# stops it.
TRAIN = ["train", "--model", "mlp", "--dataset", "fashion-mnist", "--num_epochs", "300",
         "--limit_train_batches", "100", "--limit_test_batches", "4", "--batch_size", "64",
         "--threads", "1"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """`ddpx serve` as its own process; `env` adds variables to its environment."""

    def __init__(self, env=None):
        self.dir = tempfile.mkdtemp(prefix="ddpx-dashboard-")
        self.state = os.path.join(self.dir, "state")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(self.dir, "serve.log"), "wb")
        self.process = subprocess.Popen(
            [DDPX, "serve", "--state", self.state, "--listen", f"127.0.0.1:{self.port}",
             "--slots", "2"],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
            start_new_session=True)
        for _ in range(100):
            try:
                if self.request("GET", "/api/v1/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        self.close()
        raise AssertionError(f"the service did not come up: {self.log_text()}")

    def log_text(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def token(self, user, admin=False):
        out = subprocess.run([DDPX, "serve", "--state", self.state, "token", "add", user]
                             + (["--admin"] if admin else []),
                             capture_output=True, text=True, timeout=30, check=True)
        return out.stdout.splitlines()[0]

    def request(self, method, path, token=None, body=None):
        """(status, body as text, headers) of an HTTP request to the service."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=30) as res:
                return res.status, res.read().decode(), res.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), e.headers

    def api(self, method, path, token, body=None, expect=200):
        status, text, _ = self.request(method, path, token, body)
        if status != expect:
            raise AssertionError(f"{method} {path}: {status} {text} (expected {expect})")
        return json.loads(text)

    def close(self):
        """Stops every job (over the API, then by force) and the service; removes the state."""
        try:
            if self.process.poll() is None:
                admin = self.token("cleanup", admin=True)
                for job in self.api("GET", "/api/v1/jobs", admin):
                    if job["state"] != "ended":
                        self.request("POST", f"/api/v1/jobs/{job['id']}/stop", admin)
                deadline = time.monotonic() + 15
                while time.monotonic() < deadline and any(
                        j["state"] != "ended" for j in self.api("GET", "/api/v1/jobs", admin)):
                    time.sleep(0.2)
        finally:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
            kill_holders(self.dir)
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)


def kill_holders(folder):
    """SIGKILL to every process with its working folder or an open file under `folder`: the jobs
    that the service started there and that did not stop (their logs are under it)."""
    for _ in range(20):
        holders = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                names = ["cwd"] + [f"fd/{fd}" for fd in os.listdir(f"/proc/{pid}/fd")]
                links = [os.readlink(f"/proc/{pid}/{name}") for name in names]
            except OSError:
                continue  # gone, or not ours to read
            if int(pid) != os.getpid() and any(l.startswith(folder + "/") for l in links):
                holders.append(int(pid))
        if not holders:
            return
        for pid in holders:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    print(f"dashboard_test: processes under {folder} outlived SIGKILL", file=sys.stderr)


def start_browser(downloads):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1400"]:
        options.add_argument(arg)
    options.add_experimental_option("prefs", {"download.default_directory": downloads})
    return webdriver.Chrome(options=options,
                            service=webdriver.ChromeService(executable_path=CHROMEDRIVER))


class Page:
    """The dashboard in the browser, with waits that say what the page showed instead."""

    def __init__(self, browser, service):
        self.browser = browser
        self.browser.get(service.url + "/")
        self.browser.execute_script("sessionStorage.clear()")  # signed out, as in a new tab
        self.browser.refresh()

    def find(self, css):
        return self.browser.find_element(By.CSS_SELECTOR, css)

    def text(self, css):
        return self.find(css).text

    def sign_in(self, token):
        self.find("#token").send_keys(token)
        self.find("#sign-in").click()

    def wait(self, what, condition, timeout=WAIT_S):
        try:
            return WebDriverWait(self.browser, timeout, poll_frequency=0.2).until(
                lambda _: condition())
        except TimeoutException:
            raise AssertionError(
                f"after {timeout} s the page shows no {what}; error: '{self.text('#error')}', "
                f"status: '{self.text('#status')}'") from None

    def attribute(self, css, name):
        elements = self.browser.find_elements(By.CSS_SELECTOR, css)
        return elements[0].get_attribute(name) if elements else None


class DashboardTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.service = Service()
        cls.addClassCleanup(cls.service.close)
        cls.downloads = tempfile.mkdtemp(prefix="ddpx-dashboard-downloads-")
        cls.addClassCleanup(shutil.rmtree, cls.downloads, ignore_errors=True)
        cls.browser = start_browser(cls.downloads)
        cls.addClassCleanup(cls.browser.quit)

    def test_page_and_its_files_need_no_token(self):
        for path, kind in [("/", "text/html"), ("/static/dashboard.js", "text/javascript"),
                           ("/static/dashboard.css", "text/css")]:
            status, body, headers = self.service.request("GET", path)
            self.assertEqual(status, 200, f"{path}: {body}")
            self.assertTrue(headers["Content-Type"].startswith(kind), headers["Content-Type"])
            self.assertIn("default-src 'self'", headers["Content-Security-Policy"], path)
        status, body, _ = self.service.request("GET", "/static/nothing.js")
        self.assertEqual(status, 404, body)

    def test_wrong_token_shows_the_apis_error(self):
        page = Page(self.browser, self.service)
        page.sign_in("not-a-token")
        page.wait("error for the wrong token", lambda: "unknown token" in page.text("#error"))
        self.assertIn("401: unknown token: ask the service's admin", page.text("#error"))
        self.assertEqual(page.attribute("#login", "data-signed-in"), "false")
        self.assertFalse(page.find("#main").is_displayed())

    def test_running_job_shows_its_curves_and_the_stop_button_ends_it(self):
        token = self.service.token("alice")
        job = self.service.api("POST", "/api/v1/jobs", token,
                               {"command": TRAIN, "workers": 2, "ports": 1}, expect=201)
        row = f'#jobs tr[data-job-id="{job["id"]}"]'
        page = Page(self.browser, self.service)
        page.sign_in(token)
        page.wait("running job", lambda: page.attribute(row, "data-state") == "running")
        self.assertIn("--model mlp", page.text(f"{row} td:nth-child(4)"))
        self.assertEqual(page.text(f"{row} td:nth-child(2)"), "alice")
        page.wait("curve with 2 points", lambda: page.attribute("#curves", "data-job-id")
                  == str(job["id"]) and int(page.attribute("#curves", "data-points")) >= 2)
        page.wait("device use", lambda: int(page.attribute("#host", "data-samples")) >= 2)
        self.assertIn("CPU", page.text("#host-now"))
        # The charts themselves hold the points (Chart.js from Debian's libjs-chart.js).
        self.assertFalse(page.find("#charts-note").is_displayed(), "no Chart.js was served")
        points = self.browser.execute_script(
            "return [Chart.getChart('loss-chart').data.datasets[0].data.length,"
            " Chart.getChart('host-chart').data.labels.length]")
        self.assertGreaterEqual(points[0], 2, "loss points in the chart")
        self.assertGreaterEqual(points[1], 2, "host samples in the chart")
        screenshot = os.environ.get("DDPX_DASHBOARD_SCREENSHOT")
        if screenshot:  # a picture for docs/serve.md: a few more epochs and samples first
            page.wait("curve with 10 points",
                      lambda: int(page.attribute("#curves", "data-points")) >= 10)
            self.assertTrue(self.browser.save_screenshot(screenshot), screenshot)

        # No script error nor failed load so far (the API's refusals come later).
        self.assertEqual([e for e in self.browser.get_log("browser") if e["level"] == "SEVERE"],
                         [])

        # Snapshot: the job writes one at its next step (the API lists it); Backup: the browser
        # saves the job's .tar.gz.
        for action, done in [("snapshot", "snapshot requested"), ("backup", "backup saved as")]:
            page.find(f'{row} button[data-action="{action}"]').click()
            page.wait(f"answer to {action}",
                      lambda: done in page.text("#status")
                      or f"{action} failed: " in page.text("#error"))
            self.assertIn(done, page.text("#status"), page.text("#error"))
        page.wait("the snapshot in the job's list", lambda: any(
            c["kind"] == "snapshot"
            for c in self.service.api("GET", f"/api/v1/jobs/{job['id']}/snapshots", token)))
        page.wait("downloaded backup", lambda: any(
            name.endswith(".tar.gz") for name in os.listdir(self.downloads)))

        page.find(f'{row} button[data-action="stop"]').click()
        page.wait("reply to Stop", lambda: f"Job {job['id']}: stop sent" in page.text("#status"))
        deadline = time.monotonic() + 30
        while (state := self.service.api("GET", f"/api/v1/jobs/{job['id']}", token))["state"] \
                != "ended":
            self.assertLess(time.monotonic(), deadline, f"the job did not end: {state}")
            time.sleep(0.2)
        self.assertEqual(state["exit_code"], 143, state)
        page.wait("ended job", lambda: page.attribute(row, "data-state") == "ended")
        self.assertFalse(page.find(f'{row} button[data-action="stop"]').is_enabled())

    def test_without_chartjs_the_page_shows_tables_and_a_note(self):
        service = Service(env={"DDPX_CHARTJS": "/nonexistent/chart.min.js"})
        try:
            status, body, _ = service.request("GET", "/static/chart.js")
            self.assertEqual(status, 404, body)
            self.assertIn("install Debian's libjs-chart.js", body)
            page = Page(self.browser, service)
            page.sign_in(service.token("bob"))
            page.wait("jobs section", lambda: page.find("#main").is_displayed())
            self.assertTrue(page.find("#charts-note").is_displayed())
            page.wait("empty-jobs note", lambda: page.find("#no-jobs").is_displayed())
            self.assertEqual(page.text("#error"), "")
        finally:
            service.close()


def main():
    missing = [name for name, path in [("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER)]
               if not path]
    if missing:
        print(f"SKIP: no {' or '.join(missing)} on PATH: the dashboard test drives Debian's "
              "chromium through chromium-driver (scripts/bootstrap --tests installs both)")
        return 77
    if not os.access(DDPX, os.X_OK):
        print(f"usage: {sys.argv[0]} PATH/TO/ddpx (the built binary; got '{DDPX}')")
        return 2
    if webdriver is None:
        print(f"FAIL: {sys.executable} has no selenium; scripts/python-env --tests installs it")
        return 1
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: never download a driver
    result = unittest.main(argv=[sys.argv[0], "-v"], exit=False).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
