"""torchmon: torch.monitor, out of process.

A drop-in for ``torch.monitor``: swap ``import torch.monitor as monitor`` for
``import torchmon as monitor`` and every ``Stat`` is aggregated by the
torchmond daemon beside the job, exposed to Prometheus and queryable with
``torchmonctl``. The same C++ client as the C++ API does the work; ``add``
never blocks, raises or waits for the network.

The default client connects lazily to ``$TORCHMON_TARGET`` (else the default
socket) with identity labels from ``$TORCHMON_LABELS``, torchrun/SLURM
variables and the hostname, and flushes at interpreter exit.
"""

from __future__ import annotations

import atexit
import datetime as _dt
import enum
import os
import sys
import threading
import time as _time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Union

from . import _torchmon

#: The torchmon version (the project's, as in the wheel's metadata).
__version__: str = _torchmon.__version__


def bundled_versions() -> List[str]:
    """The libraries linked into the extension, as ``"package version"`` of
    the Debian source packages they were built from (the portable wheel,
    deploy/release/deps.lock); empty for a build linked against the system's
    shared libraries."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "BUNDLED_VERSIONS")
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []

__all__ = [
    "__version__", "Aggregation", "VALUE", "MEAN", "COUNT", "SUM", "MAX", "MIN", "STAT_EVENT",
    "Client", "Stat", "Event", "EventHandlerHandle", "data_value_t",
    "log_event", "register_event_handler", "unregister_event_handler",
    "TensorboardEventHandler", "default_client", "set_default_client", "flush",
]


def __dir__() -> List[str]:
    # dir(torchmon) is the public API (and torch.monitor's private
    # _WaitCounter, which it exports), not the modules and typing names
    # this file imports.
    return sorted(__all__ + ["_WaitCounter", "_WaitCounterTracker"])

class Aggregation(enum.IntEnum):
    """Aggregations computed over each window (torch.monitor.Aggregation)."""

    #: The last value added in the window.
    VALUE = 1
    #: The arithmetic mean of the values added.
    MEAN = 2
    #: The number of values added.
    COUNT = 3
    #: The sum of the values added.
    SUM = 4
    #: The largest value added (NaN if any was NaN).
    MAX = 5
    #: The smallest value added (NaN if any was NaN).
    MIN = 6

    def __str__(self) -> str:
        # As torch.monitor's (a pybind11 enum) prints: "Aggregation.MEAN".
        return f"Aggregation.{self.name}"


VALUE = Aggregation.VALUE
MEAN = Aggregation.MEAN
COUNT = Aggregation.COUNT
SUM = Aggregation.SUM
MAX = Aggregation.MAX
MIN = Aggregation.MIN

#: Name of the events a Stat logs when one of its windows completes.
STAT_EVENT = "torch.monitor.Stat"

data_value_t = Union[str, float, int, bool]

#: How long the interpreter waits at exit for the daemon to acknowledge.
EXIT_FLUSH_TIMEOUT = 5.0


def _seconds(timeout: Union[float, _dt.timedelta]) -> float:
    if isinstance(timeout, _dt.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _window_us(window_size: _dt.timedelta) -> int:
    """A Stat's window_size in µs. Any positive window, as torch.monitor
    takes it; the daemon is sent the nearest it aggregates, 10 ms to 31 days
    (protocol::DaemonWindowMs, docs/semantics.md): nothing is refused."""
    if not isinstance(window_size, _dt.timedelta):
        raise TypeError(f"window_size must be a datetime.timedelta, not {type(window_size).__name__}")
    if window_size <= _dt.timedelta(0):
        # torch.monitor divides by it (a 0 ms window kills the process).
        raise ValueError(f"window_size must be positive, not {window_size}")
    return window_size // _dt.timedelta(microseconds=1)


# Whether torch.monitor's get() and window events carry VALUE. torch 1.13
# and 2.6 (every torch this was checked against, docs/python.md) leave it
# out although it may be asked for; a torch in this process is asked
# directly, with a Stat of its own that never records a sample (so no
# event, and no handler is touched). Without torch loaded: as those do.
_VALUE_REPORTED_WITHOUT_TORCH = False
_value_reported_by_torch: Optional[bool] = None


def _value_reported() -> bool:
    global _value_reported_by_torch
    if _value_reported_by_torch is not None:
        return _value_reported_by_torch
    if "torch" not in sys.modules:
        return _VALUE_REPORTED_WITHOUT_TORCH
    import torch.monitor as torch_monitor
    probe = torch_monitor.Stat("torchmon.value_probe", [torch_monitor.Aggregation.VALUE],
                               _dt.timedelta(hours=1))
    _value_reported_by_torch = torch_monitor.Aggregation.VALUE in probe.get()
    return _value_reported_by_torch


def _timestamp_us(timestamp: _dt.datetime) -> int:
    # Naive datetimes are local time, as datetime.timestamp() assumes and as
    # torch.monitor stamps its events.
    return int(round(timestamp.timestamp() * 1_000_000))


class Event:
    """A named, timestamped event with typed data (torch.monitor.Event)."""

    __slots__ = ("name", "timestamp", "data")

    def __init__(self, name: str, timestamp: _dt.datetime,
                 data: Mapping[str, data_value_t]) -> None:
        self.name = name
        self.timestamp = timestamp
        self.data = dict(data)

    def __repr__(self) -> str:
        return f"Event(name={self.name!r}, timestamp={self.timestamp!r}, data={self.data!r})"


class EventHandlerHandle:
    """Returned by register_event_handler; pass it to unregister_event_handler."""

    __slots__ = ("_callback",)

    def __init__(self, callback: Callable[[Event], None]) -> None:
        self._callback = callback


_handlers_lock = threading.Lock()
_handlers: List[EventHandlerHandle] = []


def register_event_handler(callback: Callable[[Event], None]) -> EventHandlerHandle:
    """Calls ``callback(event)`` for every event logged in this process.

    As with torch.monitor, handlers run synchronously inside ``log_event``
    and when a Stat's local window completes (a ``torch.monitor.Stat`` event
    with ``{"<name>.<agg>": value}`` data). Keep them quick. Window summaries
    computed by the daemon across processes are not pushed back here; read
    them with the Query API or ``torchmonctl watch``.
    """
    handle = EventHandlerHandle(callback)
    with _handlers_lock:
        _handlers.append(handle)
    return handle


def unregister_event_handler(handle: EventHandlerHandle) -> None:
    """Stops calling the handler; unknown handles are ignored."""
    with _handlers_lock:
        if handle in _handlers:
            _handlers.remove(handle)


def _call_handlers(event: Event) -> None:
    with _handlers_lock:
        handlers = list(_handlers)
    for handle in handlers:
        handle._callback(event)


def _stat_window_completed(data: Dict[str, float]) -> None:
    if _handlers:
        _call_handlers(Event(STAT_EVENT, _dt.datetime.now(), data))


class TensorboardEventHandler:
    """Writes ``torch.monitor.Stat`` events to a TensorBoard ``SummaryWriter``
    (torch.monitor.TensorboardEventHandler): each key of the event's data,
    e.g. ``"train.loss.mean"``, becomes one scalar, stamped with the event's
    time. Other events are ignored. Register it in this process::

        register_event_handler(TensorboardEventHandler(SummaryWriter()))

    (The daemon can also write every window itself: torchmond
    --tensorboard-dir, docs/sinks.md.)
    """

    def __init__(self, writer: object) -> None:
        self._writer = writer

    def __call__(self, event: Event) -> None:
        if event.name != STAT_EVENT:
            return
        walltime = event.timestamp.timestamp()
        for key, value in event.data.items():
            self._writer.add_scalar(key, value, walltime=walltime)  # type: ignore[attr-defined]


class _WaitCounter:
    """Time spent waiting, by key (torch.monitor._WaitCounter, torch ≥ 2.4)::

        with torchmon._WaitCounter("data.loader").guard():
            batch = next(it)

    Each key is two stats in the daemon, in windows of 10 s:
    ``<key>.wait_s`` (COUNT: waits, SUM: total and MAX: longest wait, in
    seconds, and a native histogram of the waits) and ``<key>.active``
    (VALUE and MAX of the guards open at once): the series PyTorch's own
    wait counters become with ``torchmon.torch.enable_metrics()`` (one
    rule, C++'s ``torchmon::WaitCounter``; docs/torch-metrics.md). A key
    is named as a stat is, with the same limits and errors
    (``Client.errors()``). With ``TORCH_DISABLE_WAIT_COUNTERS=1`` in the
    environment when it is made, as with torch, it records nothing.
    """

    _keys_lock = threading.Lock()
    _keys: Dict[str, object] = {}

    class _Guard:
        """What guard() returns (torch's _WaitCounterTracker): enters and
        exits as torch 2.6's does: __enter__ gives None, an exception inside
        the guard goes on, one guard may be entered again (nested, or after
        it exited), and an exit without an enter does nothing."""

        __slots__ = ("_counter", "_starts")

        def __init__(self, counter: object) -> None:
            self._counter = counter
            self._starts: List[int] = []

        def __enter__(self) -> None:
            counter = self._counter
            if counter is not None:
                _torchmon.wait_counter_begin(counter)
                self._starts.append(_time.monotonic_ns())

        def __exit__(self, *exc_info: object) -> None:
            counter = self._counter
            if counter is None or not self._starts:
                return
            _torchmon.wait_counter_end(counter, _time.monotonic_ns() - self._starts.pop())

    def __init__(self, key: str) -> None:
        self._counter: object = None
        # torch takes a str, or bytes as UTF-8 (pybind11's std::string).
        if isinstance(key, bytes):
            key = key.decode("utf-8")
        elif not isinstance(key, str):
            raise TypeError(f"_WaitCounter(): key must be str, not {type(key).__name__}")
        if os.environ.get("TORCH_DISABLE_WAIT_COUNTERS") == "1":
            return
        # One set of stats per key, shared by every counter of that key.
        with _WaitCounter._keys_lock:
            found = _WaitCounter._keys.get(key)
            if found is None:
                found = _WaitCounter._keys[key] = _torchmon.wait_counter(
                    default_client()._native, key)
        self._counter = found

    def guard(self) -> "_WaitCounter._Guard":
        """A context manager timing one wait."""
        return _WaitCounter._Guard(self._counter)


# torch's name for what guard() returns (torch._C._monitor._WaitCounterTracker).
_WaitCounterTracker = _WaitCounter._Guard
_WaitCounterTracker.__name__ = _WaitCounterTracker.__qualname__ = "_WaitCounterTracker"


class Client:
    """A connection to torchmond: one sender thread, one stream.

    ``target`` is ``"unix:///abs/path"`` or ``"host:port"`` (default:
    ``$TORCHMON_TARGET``, else the default socket). ``labels`` are identity
    labels applied to every stat and event, merged over the ones found in
    the environment unless ``labels_from_environment`` is False. A client
    is usable as a context manager; leaving the block flushes.

    Security (docs/security.md): ``token_file`` holds the daemon's bearer
    token (default ``$TORCHMON_TOKEN_FILE``), or ``token`` gives it
    directly. For a TCP target, ``tls_ca`` (``$TORCHMON_TLS_CA``) turns TLS
    on and names the CA that signed the daemon's certificate; ``tls_cert``
    and ``tls_key`` (``$TORCHMON_TLS_CERT``, ``$TORCHMON_TLS_KEY``) are this
    client's certificate, for a daemon that asks for one; ``tls_server_name``
    (``$TORCHMON_TLS_SERVER_NAME``) is the name the daemon's certificate must
    carry if it is not the target's host. Settings that cannot be honoured
    (an unreadable file, a token bound for another host without TLS) make
    the client refuse to connect; ``errors()`` says why.
    """

    def __init__(self, target: Optional[str] = None,
                 labels: Optional[Mapping[str, str]] = None, *,
                 labels_from_environment: bool = True,
                 buffer_bytes: int = 0,
                 token_file: Optional[str] = None,
                 token: Optional[str] = None,
                 tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None,
                 tls_server_name: Optional[str] = None) -> None:
        self._native = _torchmon.Client(
            target, dict(labels) if labels is not None else None, labels_from_environment,
            buffer_bytes, f"torchmon-python pid={os.getpid()}", token_file, token, tls_ca,
            tls_cert, tls_key, tls_server_name)

    @property
    def target(self) -> str:
        return self._native.target

    @property
    def labels(self) -> Dict[str, str]:
        return self._native.labels

    def flush(self, timeout: Union[float, _dt.timedelta] = 5.0) -> bool:
        """Waits until everything recorded so far is acknowledged by the daemon.

        Returns True if it was, False if ``timeout`` passed first (nothing is
        lost: buffered samples keep being retried). The GIL is released while
        waiting.
        """
        return self._native.flush(_seconds(timeout))

    def log_event(self, event: Event, labels: Optional[Mapping[str, str]] = None) -> None:
        """Sends ``event`` to the daemon (handlers are not called; see log_event)."""
        self._native.log_event(event.name, _timestamp_us(event.timestamp), event.data,
                               dict(labels) if labels is not None else None)

    def stats(self) -> Dict[str, int]:
        """Cumulative counters (see torchmon::ClientStats in client.h).

        Once a flush succeeded: samples_added == samples_delivered +
        samples_dropped, and the same for events (logged, delivered, dropped).
        ``daemon_restarts`` counts acks from a new daemon process;
        ``batches_resent`` the batches written again after a broken stream.
        """
        return self._native.stats()

    def errors(self) -> List[str]:
        """The daemon's refusals not yet taken, oldest first."""
        return self._native.take_errors()

    def close(self, timeout: Union[float, _dt.timedelta] = 5.0) -> bool:
        """Flushes; the connection closes once no Stat uses the client."""
        return self.flush(timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


_default_lock = threading.Lock()
_default: Optional[Client] = None


def default_client() -> Client:
    """The process-wide client, created on first use from the environment."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Client()
            if not _exit_hook_registered:
                _register_exit_hook()
        return _default


def set_default_client(client: Optional[Client]) -> Optional[Client]:
    """Makes ``client`` the one Stat, log_event and flush use by default
    (None: create one from the environment on next use). Returns the previous
    default. Stats already created keep the client they were created with."""
    global _default
    with _default_lock:
        previous, _default = _default, client
        if client is not None and not _exit_hook_registered:
            _register_exit_hook()
        return previous


_exit_hook_registered = False


def _register_exit_hook() -> None:
    global _exit_hook_registered
    _exit_hook_registered = True
    atexit.register(_flush_at_exit)


def _flush_at_exit() -> None:
    client = _default
    if client is None:
        return
    _torchmon.report_open_windows()
    if not client.flush(EXIT_FLUSH_TIMEOUT):
        print(f"torchmon: could not deliver everything to {client.target} at exit "
              f"within {EXIT_FLUSH_TIMEOUT}s", file=sys.stderr)


def flush(timeout: Union[float, _dt.timedelta] = 5.0) -> bool:
    """Flushes the default client (see Client.flush)."""
    return default_client().flush(timeout)


class Stat(_torchmon.Stat):
    """A stat aggregated in fixed windows by torchmond (torch.monitor.Stat).

    ``aggregations`` holds ``Aggregation`` members and, beyond
    torch.monitor, names: ``"mean"`` and the others, and quantiles ``"p50"``,
    ``"p99"``, ``"p99.9"`` (any ``pNN``, at most four decimals), estimated
    by the daemon per window within 1% relative error. Quantiles are
    computed by the daemon only: ``get()`` and the ``torch.monitor.Stat``
    window events of this process carry the six aggregations, not them;
    read quantiles from Prometheus (``agg="p99"``), ``torchmonctl`` or the
    Query API. A name that is not an aggregation raises ``ValueError``.

    ``window_size`` is a positive ``datetime.timedelta``. In this process
    it is torch.monitor's, any length in whole milliseconds as torch counts
    them (a window under 1 ms is 1 ms here, where torch.monitor divides by
    zero); the daemon aggregates windows of 10 ms to 31 days and is sent
    the nearest of those bounds for a window outside them
    (docs/semantics.md).

    In this process ``count``, ``get()`` and the window events are
    torch.monitor's exactly: steady-clock windows, ``max_samples`` closing
    a window early, the open window logged when the Stat is destroyed, and
    VALUE left out of ``get()`` and the events as the torch.monitor in this
    process does (torch 1.13 and 2.6 do; without torch loaded, likewise),
    though the daemon aggregates it. Every sample also
    goes to the daemon, which aggregates epoch-aligned windows across
    processes and caps each at ``max_samples`` without closing it early
    (docs/semantics.md). ``labels`` are added to the client's identity
    labels; ``client`` defaults to ``default_client()``.
    ``histogram=True`` has the daemon keep a Prometheus native histogram of
    every sample the series accepts (``torchmon_stat_distribution``), which
    PromQL sums across ranks and nodes into the job's quantiles; a stat with
    a quantile always has one. With it ``aggregations`` may be empty.
    """

    # One object per stat, the native one: add() and the counters are its
    # methods, found on the type (add costs one C call, no Python frame,
    # and no bound method is kept per instance). Weakly referable, as
    # torch.monitor's Stat is.
    __slots__ = ("__weakref__",)

    def __init__(self, name: str, aggregations: Sequence[Union[Aggregation, str]],
                 window_size: _dt.timedelta, max_samples: int = sys.maxsize, *,
                 labels: Optional[Mapping[str, str]] = None,
                 client: Optional[Client] = None, histogram: bool = False) -> None:
        client = client if client is not None else default_client()
        super().__init__(
            client._native, name, list(aggregations), _window_us(window_size), max_samples,
            dict(labels) if labels is not None else None, _stat_window_completed,
            histogram=histogram, report_value=_value_reported())

    def get(self) -> Dict[Aggregation, float]:
        """This process's aggregates of the last completed window (zeros before one).

        The six aggregations only; quantiles are the daemon's (see Stat).
        """
        return {Aggregation(k): v for k, v in super().get().items()}

    def __del__(self) -> None:
        self.report_open_window()


def log_event(event: Event) -> None:
    """Calls the registered handlers, then sends ``event`` to the daemon.

    A handler that raises stops the others and the exception reaches the
    caller, as with torch.monitor (the handler stays registered); the event
    reaches the daemon all the same."""
    try:
        _call_handlers(event)
    finally:
        default_client().log_event(event)
