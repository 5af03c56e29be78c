"""Bridge from torch.monitor to torchmond.

Code that already uses ``torch.monitor`` gets everything it logs into the
daemon (and so into Prometheus) with one line::

    import torchmon.torch
    torchmon.torch.forward_events()

Every event torch.monitor logs — ``torch.monitor.log_event`` calls and the
``torch.monitor.Stat`` events its Stats emit when a window closes — is sent
to the daemon as an event with the same name, timestamp and data. The
daemon keeps them queryable (``torchmonctl events``) and exposes each
numeric field as ``torchmon_event_value{event=..., field=...}``, e.g.
``field="train.loss.mean"`` for a torch.monitor Stat named ``train.loss``.

And what PyTorch measures itself, with no Stat calls: ``enable_metrics()``
(or ``TORCHMON_TORCH_METRICS=1`` in the job's environment) reports c10's
wait counters, torch.compile's compilations, DDP's timings, optimizer steps
and CUDA memory per process and window (docs/torch-metrics.md).
"""

from __future__ import annotations

from typing import Dict, Optional

import torch.monitor as _monitor

from . import Client, Event, _torch_metrics, default_client

__all__ = ["Bridge", "enable_metrics", "forward_events", "metrics_status"]


class Bridge:
    """A registered forwarding handler. ``close()`` (or leaving a ``with``
    block) unregisters it; calling it twice is harmless."""

    def __init__(self, client: Optional[Client]) -> None:
        self._client = client
        self._handle: Optional[_monitor.EventHandlerHandle] = _monitor.register_event_handler(
            self._forward)

    def _forward(self, event: "_monitor.Event") -> None:
        client = self._client if self._client is not None else default_client()
        client.log_event(Event(event.name, event.timestamp, dict(event.data)))

    def close(self) -> None:
        if self._handle is not None:
            _monitor.unregister_event_handler(self._handle)
            self._handle = None

    def __enter__(self) -> "Bridge":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def forward_events(client: Optional[Client] = None) -> Bridge:
    """Registers a torch.monitor event handler that forwards every event to
    torchmond through ``client`` (default: torchmon's default client)."""
    return Bridge(client)


def enable_metrics(client: Optional[Client] = None) -> Dict[str, str]:
    """Reports PyTorch's own metrics through ``client`` (default: torchmon's
    default client) in windows of 10 s: c10's wait counters (torch ≥
    2.6), torch.compile's compilations (≥ 2.0), DDP's forward, backward and
    communication times, the wall time between optimizer steps (≥ 2.0) and
    CUDA memory where CUDA is in use. What ``TORCHMON_TORCH_METRICS=1`` does
    at interpreter start. Call it before torch.distributed or torch.compile
    first run: c10 looks for the wait-counter backend only once. What this
    torch lacks is printed once on stderr. Idempotent; returns each
    source's state: ``"on"`` or why not (docs/torch-metrics.md)."""
    return _torch_metrics.enable(client)


def metrics_status() -> Dict[str, str]:
    """What enable_metrics() reported, per source ({} before it ran)."""
    return _torch_metrics.status()
