"""Run inside a venv the torchmon wheel was installed in (tests/wheel/test_wheel.py).

    smoke.py TARGET ALLOWED_SONAMES_JSON

Uses the drop-in API against the daemon at TARGET and prints one JSON object:
what this process saw (count, get(), window events, flush, client stats) and
every shared library mapped since before `import torchmon` that comes from
outside the wheel and is not one of the allowed host libraries. The test
reads the daemon's side back with torchmonctl.
"""

import datetime
import json
import os
import sys
import time


def mapped_libraries():
    with open("/proc/self/maps") as f:
        return {line.split(None, 5)[5].strip() for line in f
                if len(line.split(None, 5)) == 6 and ".so" in line.split(None, 5)[5]}


before = mapped_libraries()
target, allowed = sys.argv[1], set(json.loads(sys.argv[2]))

import torchmon as monitor  # noqa: E402

WINDOW_MS = 500
client = monitor.Client(target=target, labels={"python": sys.version.split()[0]},
                        labels_from_environment=False)
monitor.set_default_client(client)
events = []
handle = monitor.register_event_handler(events.append)
step = monitor.Stat("wheel.step_ms",
                    [monitor.Aggregation.MEAN, monitor.Aggregation.COUNT, monitor.MAX, "p99"],
                    datetime.timedelta(milliseconds=WINDOW_MS))

# 1..100 at the start of a window, so they land in one window.
now_ms = time.time() * 1000
time.sleep(((now_ms // WINDOW_MS + 1) * WINDOW_MS - now_ms) / 1000 + 0.01)
for v in range(1, 101):
    step.add(float(v))
count = step.count
# One more in a later window completes the first one locally.
time.sleep(WINDOW_MS / 1000 + 0.05)
step.add(1000.0)
got = {a.name: v for a, v in step.get().items()}
monitor.log_event(monitor.Event("wheel.epoch_end", datetime.datetime.now(),
                                {"epoch": 3, "loss": 0.25, "tag": "best", "saved": True}))
flushed = monitor.flush(10)

package_dir = os.path.dirname(os.path.realpath(monitor.__file__))
site = os.path.dirname(package_dir)
# The interpreter's own extension modules (lib-dynload) live under its stdlib.
stdlib = os.path.realpath(os.path.dirname(os.__file__))
foreign = sorted(
    path for path in mapped_libraries() - before
    if not os.path.realpath(path).startswith((package_dir + os.sep, os.path.join(site, "torchmon.libs") + os.sep, stdlib + os.sep))
    # libstdc++.so.6 is mapped as libstdc++.so.6.0.30: the soname or a longer version.
    and not any(os.path.basename(path) == soname or os.path.basename(path).startswith(soname + ".")
                for soname in allowed))

print(json.dumps({
    "version": monitor.__version__,
    "python": sys.version.split()[0],
    "file": monitor.__file__,
    "aggregation": [str(monitor.Aggregation.MEAN), monitor.Aggregation.MEAN.name,
                    int(monitor.Aggregation.MEAN)],
    "count": count,
    "get": got,
    "events": [{"name": e.name, "data": e.data} for e in events],
    "flushed": flushed,
    "stats": client.stats(),
    "errors": client.errors(),
    "foreign_libraries": foreign,
}))
