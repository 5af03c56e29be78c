"""torchmon.torch forwards every torch.monitor event to the daemon."""

import datetime
import time

import torch.monitor
import torchmon
import torchmon.torch
from conftest import OWN_USER


def test_bridge_forwards_torch_monitor_stat_window_events(daemon):
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    with torchmon.torch.forward_events(client):
        stat = torch.monitor.Stat("bridge.loss", [torch.monitor.Aggregation.MEAN,
                                                  torch.monitor.Aggregation.COUNT],
                                  datetime.timedelta(milliseconds=50))
        stat.add(1.0)
        stat.add(2.0)
        # torch.monitor logs the window on the first add after it elapsed.
        time.sleep(0.06)
        stat.add(5.0)
        torch.monitor.log_event(torch.monitor.Event(
            "epoch_end", datetime.datetime.now(), {"epoch": 1, "acc": 0.75}))
        assert client.flush(5)
    events = daemon.ctl("events")["events"]
    stat_events = [e for e in events if e["name"] == "torch.monitor.Stat"]
    assert stat_events, events
    assert stat_events[0]["data"] == {"bridge.loss.mean": 1.5, "bridge.loss.count": 2.0}
    (epoch,) = [e for e in events if e["name"] == "epoch_end"]
    assert epoch["data"] == {"epoch": 1, "acc": 0.75}
    # Numeric fields reach Prometheus: the last value of the last such event.
    # (A slow run, e.g. under TSan, can see a second window's event, mean 5,
    # logged by the time of the scrape.)
    scrape = daemon.scrape()
    events = daemon.ctl("events")["events"]
    last = [e for e in events if e["name"] == "torch.monitor.Stat"][-1]["data"]
    value = "%g" % last["bridge.loss.mean"]
    assert ('torchmon_event_value{event="torch.monitor.Stat",field="bridge.loss.mean",'
            f'user="{OWN_USER}"}} ' + value in scrape), scrape


def test_closed_bridge_forwards_nothing(daemon):
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    bridge = torchmon.torch.forward_events(client)
    bridge.close()
    bridge.close()  # harmless twice
    torch.monitor.log_event(torch.monitor.Event("unseen", datetime.datetime.now(), {}))
    assert client.flush(5)
    assert daemon.ctl("events", "unseen")["events"] == []
