"""A real headless Chromium for tests and benchmarks: Debian's
/usr/bin/chromium driven by playwright-core (from npm, installed into the
build tree on first use) through browser.mjs, one JSON command a line.

    with Browser() as b:
        b.open("http://127.0.0.1:9464/", timezone="Asia/Kolkata")
        b.wait("document.querySelectorAll('.chart').length > 0")
        ticks = b.eval("[...document.querySelectorAll('.xtick')].map(t => t.textContent)")
"""

import json
import os
import select
import shutil
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PLAYWRIGHT_VERSION = "1.65.1"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def playwright_dir(build_dir=None):
    """The folder whose node_modules holds playwright-core, installed with npm
    on first use (the test set-up: npm's registry must be reachable once)."""
    build_dir = build_dir or os.environ.get("TORCHMON_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")
    where = os.path.join(os.path.abspath(build_dir), "tests", "playwright")
    package = os.path.join(where, "node_modules", "playwright-core", "package.json")
    installed = None
    if os.path.exists(package):
        with open(package) as f:
            installed = json.load(f).get("version")
    if installed != PLAYWRIGHT_VERSION:
        assert shutil.which("npm") and shutil.which("node"), \
            "node and npm are missing: deploy/dev/install-deps.sh --test"
        os.makedirs(where, exist_ok=True)
        result = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-save",
                                 "--prefix", where, "playwright-core@" + PLAYWRIGHT_VERSION],
                                capture_output=True, text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError("npm install playwright-core failed:\n" + result.stderr[-3000:])
    return where


class BrowserError(RuntimeError):
    pass


class Browser:
    def __init__(self, build_dir=None, timeout=60):
        assert os.path.exists(CHROMIUM), "chromium is missing: deploy/dev/install-deps.sh --test"
        env = dict(os.environ, PLAYWRIGHT_DIR=playwright_dir(build_dir), CHROMIUM=CHROMIUM)
        self.timeout = timeout
        # stderr to a file: a pipe nobody reads could fill and stall node.
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "browser.mjs")], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1)

    def call(self, op, timeout=None, **args):
        self.proc.stdin.write(json.dumps(dict(op=op, **args)) + "\n")
        self.proc.stdin.flush()
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"{op}: no answer from the browser in {timeout or self.timeout} s")
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                break
        line = self.proc.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise BrowserError(f"{op}: the browser exited: {self.stderr.read()[-3000:]}")
        answer = json.loads(line)
        if "error" in answer:
            raise BrowserError(f"{op}: {answer['error']}")
        return answer["result"]

    def open(self, url, width=1400, height=1000, timezone=None, credentials=None):
        return self.call("open", url=url, width=width, height=height, timezone=timezone,
                         credentials=credentials)

    def goto(self, url):
        return self.call("goto", url=url)

    def eval(self, expr):
        return self.call("eval", expr=expr)

    def wait(self, expr, timeout=20):
        return self.call("wait", expr=expr, timeout_ms=int(timeout * 1000), timeout=timeout + 10)

    def mouse(self, x, y):
        return self.call("mouse", x=x, y=y)

    def type(self, selector, text, enter=True):
        return self.call("type", selector=selector, text=text, enter=enter)

    def screenshot(self, path):
        return self.call("screenshot", path=str(path))

    def errors(self):
        return self.call("errors")

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
