"""What the push tests read torchmond's requests with: a scripted HTTP
receiver on loopback (each request answered by the next answer of a script,
the last one repeating), a snappy block decoder (remote-write 1.0 bodies;
Python has no snappy module here) and the remote-write and OTLP messages,
compiled at test time by protoc from the schemas in proto/third_party."""

import http.server
import importlib
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCHEMAS = os.path.join(ROOT, "proto", "third_party")


def snappy_decompress(data):
    """The snappy block format (format_description.txt): a varint length,
    then literals and back-references."""
    pos, length, shift = 0, 0, 0
    while True:
        b = data[pos]
        pos += 1
        length |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            break
    out = bytearray()
    while pos < len(data):
        tag = data[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            n = tag >> 2
            if n < 60:
                n += 1
            else:
                width = n - 59
                n = int.from_bytes(data[pos:pos + width], "little") + 1
                pos += width
            out += data[pos:pos + n]
            pos += n
            continue
        if kind == 1:
            n = ((tag >> 2) & 7) + 4
            offset = ((tag >> 5) << 8) | data[pos]
            pos += 1
        elif kind == 2:
            n = (tag >> 2) + 1
            offset = int.from_bytes(data[pos:pos + 2], "little")
            pos += 2
        else:
            n = (tag >> 2) + 1
            offset = int.from_bytes(data[pos:pos + 4], "little")
            pos += 4
        for _ in range(n):
            out.append(out[-offset])
    assert len(out) == length, (len(out), length)
    return bytes(out)


def load_messages(out_dir):
    """Compiles the push schemas into out_dir and returns (prompb remote_pb2,
    OTLP metrics_service_pb2)."""
    protos = ["prometheus/prompb/types.proto", "prometheus/prompb/remote.proto",
              "opentelemetry/proto/common/v1/common.proto",
              "opentelemetry/proto/resource/v1/resource.proto",
              "opentelemetry/proto/metrics/v1/metrics.proto",
              "opentelemetry/proto/collector/metrics/v1/metrics_service.proto"]
    subprocess.run(["protoc", f"--proto_path={SCHEMAS}", f"--python_out={out_dir}", *protos],
                   check=True)
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return (importlib.import_module("prometheus.prompb.remote_pb2"),
            importlib.import_module("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2"))


class Request:
    def __init__(self, path, headers, body, at):
        self.path, self.headers, self.body, self.at = path, headers, body, at


class ScriptedReceiver:
    """Answers each POST with the next (status, headers, body) of `script`;
    the last answer repeats. Keeps every request it read."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    status, headers, text = receiver.script[
                        min(len(receiver.requests), len(receiver.script) - 1)]
                    receiver.requests.append(
                        Request(self.path, dict(self.headers), body, time.monotonic()))
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                payload = text.encode()
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def url(self, path="/api/v1/write"):
        return f"http://127.0.0.1:{self.port}{path}"

    def received(self):
        with self.lock:
            return list(self.requests)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
