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
"""

from __future__ import annotations

from typing import Optional

import torch.monitor as _monitor

from . import Client, Event, default_client

__all__ = ["Bridge", "forward_events"]


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
