"""TorchElastic's metrics into torchmond.

``torch.distributed.elastic.metrics`` (``put_metric``, the ``@prof``
decorator, and what the elastic agent and rendezvous publish) hands each
data point to a ``MetricHandler``. One line in a worker (or the launcher)
sends them all to the daemon::

    import torchmon.elastic
    torchmon.elastic.configure()

Each metric ``name`` of group ``group`` becomes the stat ``<group>.<name>``
(``@prof`` on ``train`` in ``trainer.py`` gives
``torchelastic.trainer.train.success``, ``.failure`` and ``.duration.ms``),
aggregated by the daemon in windows like any stat, with the process's
identity labels (``rank``, ``local_rank``, ... from torchrun's environment).
"""

from __future__ import annotations

import datetime as _dt
import threading
from typing import Dict, Optional

from torch.distributed.elastic import metrics as _metrics

from . import MAX, MEAN, MIN, SUM, VALUE, COUNT, Client, Stat

__all__ = ["MetricHandler", "configure"]


class MetricHandler(_metrics.MetricHandler):
    """Sends every TorchElastic metric to torchmond as a sample of the stat
    ``<group>.<name>``, aggregated with the six aggregations (counts such as
    ``.success`` read as SUM, durations as MEAN and MAX) in windows of
    ``window``. ``client`` defaults to torchmon's default client."""

    def __init__(self, client: Optional[Client] = None,
                 window: _dt.timedelta = _dt.timedelta(seconds=10)) -> None:
        self._client = client
        self._window = window
        self._lock = threading.Lock()
        self._stats: Dict[str, Stat] = {}

    def emit(self, metric_data: "_metrics.MetricData") -> None:
        name = f"{metric_data.group_name}.{metric_data.name}"
        with self._lock:
            stat = self._stats.get(name)
            if stat is None:
                # An invalid name is the client's to report (Client.errors()),
                # as for any stat: emit never raises into TorchElastic.
                stat = self._stats[name] = Stat(
                    name, [VALUE, MEAN, COUNT, SUM, MAX, MIN], self._window, client=self._client)
        stat.add(float(metric_data.value))


def configure(client: Optional[Client] = None,
              window: _dt.timedelta = _dt.timedelta(seconds=10),
              group: Optional[str] = None) -> MetricHandler:
    """Makes torchmon the handler of TorchElastic's metrics: of every group
    (``group=None``, TorchElastic's default handler) or of one. Returns the
    handler."""
    handler = MetricHandler(client, window)
    _metrics.configure(handler, group)
    return handler
