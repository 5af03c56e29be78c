"""What a generic gRPC tool (grpcurl, grpcui, grpc_health_probe) does, done
against the real torchmond by a client that knows nothing of torchmon's
generated code: list the services through server reflection, fetch the file
descriptors of torchmon.v1.Query, build its message classes at run time and
call ListSeries and GetWindows; call grpc.health.v1 Check. Only grpcio and
google.protobuf are used (Debian ships neither grpc_reflection nor
grpc_health for Python), so the reflection and health messages are encoded
by hand below. Samples are pushed with the real `torchmonctl push`.

Protobuf wire format (https://protobuf.dev/programming-guides/encoding/):
a message is a sequence of fields, each a varint key (field_number << 3 |
wire_type) then its value: wire type 0 a varint, 2 a varint length and that
many bytes (strings, bytes, nested messages), 1 and 5 eight and four bytes.

Field numbers used, from grpc's reflection.proto (v1alpha, what grpc++ 1.51
serves) and health.proto:
  grpc.reflection.v1alpha.ServerReflectionRequest
    3 file_by_filename (string), 4 file_containing_symbol (string),
    7 list_services (string, content ignored)
  grpc.reflection.v1alpha.ServerReflectionResponse
    4 file_descriptor_response: FileDescriptorResponse
        1 file_descriptor_proto (repeated bytes: serialized FileDescriptorProto)
    6 list_services_response: ListServiceResponse
        1 service (repeated ServiceResponse: 1 name)
    7 error_response: ErrorResponse (1 error_code int32, 2 error_message)
  grpc.health.v1.HealthCheckRequest   1 service (string)
  grpc.health.v1.HealthCheckResponse  1 status (enum: 0 UNKNOWN, 1 SERVING,
                                        2 NOT_SERVING, 3 SERVICE_UNKNOWN)
"""

import os
import subprocess
import sys
import tempfile
import time

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory

from torchmon_testing import TORCHMONCTL, Daemon

REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = 1

TOKEN = "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f"
STAT = "tooling.loss"
WINDOW_S = 2
PUSHED = [1.5, 2.5, -4.0, 8.0]
# What the window of PUSHED must hold, per aggregation.
EXPECTED = {"VALUE": 8.0, "MEAN": 2.0, "COUNT": 4.0, "SUM": 8.0, "MAX": 8.0, "MIN": -4.0}


# --- the wire format, by hand ---

def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def length_delimited(field, data):
    if isinstance(data, str):
        data = data.encode()
    return varint(field << 3 | 2) + varint(len(data)) + data


def parse(data):
    """{field number: [values]}: ints for varints, bytes for everything else."""
    fields = {}
    i = 0

    def read_varint():
        nonlocal i
        shift = value = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = read_varint()
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value = read_varint()
        elif wire_type == 2:
            size = read_varint()
            value = data[i:i + size]
            i += size
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            value = data[i:i + size]
            i += size
        else:
            raise ValueError(f"wire type {wire_type} of field {number} is not expected here")
        fields.setdefault(number, []).append(value)
    return fields


# --- what a generic tool does ---

def reflect(channel, request, metadata=None):
    """One ServerReflectionRequest on its own stream; the response, parsed."""
    call = channel.stream_stream(REFLECTION)  # no serializers: bytes in, bytes out
    responses = list(call(iter([request]), timeout=10, metadata=metadata))
    assert len(responses) == 1, responses
    response = parse(responses[0])
    if 7 in response:
        error = parse(response[7][0])
        raise AssertionError(f"reflection error {error.get(1)}: {error.get(2)}")
    return response


def list_services(channel, metadata=None):
    response = reflect(channel, length_delimited(7, ""), metadata)
    listing = parse(response[6][0])
    return sorted(parse(service)[1][0].decode() for service in listing.get(1, []))


def file_descriptors(response):
    return [descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in parse(response[4][0]).get(1, [])]


def load_symbol(channel, symbol, metadata=None):
    """A descriptor pool holding the file that defines `symbol` and every file
    it depends on, fetched through reflection as grpcurl does."""
    files = {}
    wanted = []
    for file in file_descriptors(reflect(channel, length_delimited(4, symbol), metadata)):
        files[file.name] = file
        wanted += file.dependency
    while wanted:
        name = wanted.pop()
        if name in files:
            continue
        for file in file_descriptors(reflect(channel, length_delimited(3, name), metadata)):
            files.setdefault(file.name, file)
            wanted += file.dependency
    # A file goes into the pool after the files it imports.
    pool = descriptor_pool.DescriptorPool()
    added = set()
    while len(added) < len(files):
        ready = [f for n, f in files.items()
                 if n not in added and all(d in added for d in f.dependency)]
        assert ready, f"import cycle or missing file among {sorted(files)}"
        for file in ready:
            pool.Add(file)
            added.add(file.name)
    return pool


def message_class(descriptor):
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(descriptor.file.pool).GetPrototype(descriptor)


def call(channel, pool, service, method, request, metadata=None):
    """Calls service/method with `request` given as a dict (proto3 JSON
    names); the response as a dict with the .proto's field names."""
    method_desc = pool.FindServiceByName(service).methods_by_name[method]
    request_class = message_class(method_desc.input_type)
    response_class = message_class(method_desc.output_type)
    stub = channel.unary_unary(f"/{service}/{method}",
                               request_serializer=request_class.SerializeToString,
                               response_deserializer=response_class.FromString)
    response = stub(json_format.ParseDict(request, request_class()), timeout=10,
                    metadata=metadata)
    return json_format.MessageToDict(response, preserving_proto_field_name=True)


def health_check(channel, service, metadata=None):
    check = channel.unary_unary(HEALTH_CHECK)
    response = parse(check(length_delimited(1, service), timeout=10, metadata=metadata))
    return response.get(1, [0])[0]  # proto3 leaves out 0 (UNKNOWN)


# --- fixtures ---

@pytest.fixture(scope="module")
def daemon():
    with tempfile.TemporaryDirectory(prefix="torchmon-tooling.") as tmpdir:
        d = Daemon(tmpdir, "--listen", "127.0.0.1:0")
        try:
            yield d
        finally:
            d.stop()


@pytest.fixture(scope="module")
def pushed(daemon):
    """PUSHED sent by torchmonctl into one window, which has closed; the
    series as torchmonctl (the real client) reports it. Sent over TCP, as a
    client the daemon cannot name: with --peer-labels (on by default) a
    caller the daemon cannot name, as a generic tool over TCP is here, sees
    only such clients' series, and one on the socket (this user, whom the
    daemon runs as: an admin) sees every series."""
    # One stamp for all four samples (--at), in the next window: they fall
    # into one window, and however long the push takes (a sanitizer build
    # is slow) they arrive before that window closes, within the daemon's
    # 60 s of allowed skew.
    window_ms = WINDOW_S * 1000
    at_ms = (int(time.time() * 1000) // window_ms + 1) * window_ms + 50
    pushed = subprocess.run(
        [TORCHMONCTL, "--target", daemon.tcp_target, "push", STAT, *[str(v) for v in PUSHED],
         "--agg", "value,mean,count,sum,max,min", "--window", f"{WINDOW_S}s", "--label",
         "phase=tooling", "--at", str(at_ms)], capture_output=True, text=True, timeout=30)
    assert pushed.returncode == 0, pushed.stderr
    windows = daemon.wait_windows(STAT, 1, timeout=WINDOW_S + 10)
    assert len(windows) == 1, windows
    [series] = daemon.series(STAT)
    assert "user" not in series["labels"], series
    return series


@pytest.fixture(params=["unix", "tcp"])
def channel(request, daemon):
    target = daemon.target if request.param == "unix" else daemon.tcp_target
    assert target, "the daemon has no such listener"
    with grpc.insecure_channel(target) as ch:
        yield ch


# --- tests ---

def test_this_client_uses_no_torchmon_generated_code():
    loaded = [m for m in sys.modules
              if m == "torchmon" or m.startswith("torchmon.") or m.endswith("_pb2_grpc")
              or (m.endswith("_pb2") and not m.startswith("google."))]
    assert loaded == []


def test_reflection_lists_every_service(channel):
    assert list_services(channel) == [
        "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
        "torchmon.v1.Ingest", "torchmon.v1.Query"]


def test_health_check_says_serving_for_the_daemon_and_each_service(channel):
    for service in ("", "torchmon.v1.Ingest", "torchmon.v1.Query"):
        assert health_check(channel, service) == SERVING, service


def test_health_check_of_an_unknown_service_is_not_found(channel):
    with pytest.raises(grpc.RpcError) as error:
        health_check(channel, "torchmon.v1.NoSuchService")
    assert error.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_service_is_described_by_reflection_and_callable_from_it(channel):
    pool = load_symbol(channel, "grpc.health.v1.Health")
    assert call(channel, pool, "grpc.health.v1.Health", "Check",
                {"service": "torchmon.v1.Query"}) == {"status": "SERVING"}


def test_reflection_describes_the_query_service(channel):
    pool = load_symbol(channel, "torchmon.v1.Query")
    service = pool.FindServiceByName("torchmon.v1.Query")
    methods = {m.name: (m.input_type.full_name, m.output_type.full_name)
               for m in service.methods}
    assert methods["ListSeries"] == ("torchmon.v1.ListSeriesRequest",
                                     "torchmon.v1.ListSeriesResponse")
    assert methods["GetWindows"] == ("torchmon.v1.GetWindowsRequest",
                                     "torchmon.v1.GetWindowsResponse")
    assert service.file.name == "torchmon/v1/torchmon.proto"


def test_list_series_called_generically_returns_what_was_pushed(channel, pushed):
    pool = load_symbol(channel, "torchmon.v1.Query")
    response = call(channel, pool, "torchmon.v1.Query", "ListSeries",
                    {"selector": {"stat": STAT}})
    [series] = response["series"]
    assert series["series"]["stat"] == STAT
    assert series["series"]["labels"]["phase"] == "tooling"
    # The same labels the real client sees (host and the rest of the
    # environment's identity labels).
    assert series["series"]["labels"] == pushed["labels"]
    assert series["spec"]["window_size_ms"] == str(WINDOW_S * 1000)  # int64: a JSON string
    assert sorted(series["spec"]["aggregations"]) == sorted(EXPECTED)
    assert series["counters"]["accepted"] == str(len(PUSHED))
    last = {a["aggregation"]: a["value"] for a in series["last_window"]["aggregates"]}
    assert last == EXPECTED


def test_get_windows_called_generically_returns_what_was_pushed(channel, pushed):
    pool = load_symbol(channel, "torchmon.v1.Query")
    response = call(channel, pool, "torchmon.v1.Query", "GetWindows",
                    {"selector": {"stat": STAT,
                                  "labels": [{"key": "phase", "value": "tooling"}]}})
    [window] = response["windows"]
    assert window["series"]["stat"] == STAT
    assert window["series"]["labels"] == pushed["labels"]
    assert window["accepted"] == str(len(PUSHED))
    start_ms, end_ms = int(window["start_ms"]), int(window["end_ms"])
    assert end_ms - start_ms == WINDOW_S * 1000
    assert start_ms % (WINDOW_S * 1000) == 0
    assert {a["aggregation"]: a["value"] for a in window["aggregates"]} == EXPECTED


# --- behind --auth-token-file ---

@pytest.fixture(scope="module")
def token_daemon():
    with tempfile.TemporaryDirectory(prefix="torchmon-tooling-token.") as tmpdir:
        token_file = os.path.join(tmpdir, "token")
        fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(TOKEN + "\n")
        d = Daemon(tmpdir, "--listen", "127.0.0.1:0", "--auth-token-file", token_file)
        try:
            yield d
        finally:
            d.stop()


@pytest.fixture(params=["unix", "tcp"])
def token_channel(request, token_daemon):
    target = token_daemon.target if request.param == "unix" else token_daemon.tcp_target
    with grpc.insecure_channel(target) as ch:
        yield ch


def test_without_the_token_health_is_refused(token_channel):
    with pytest.raises(grpc.RpcError) as error:
        health_check(token_channel, "")
    assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert "bearer token" in error.value.details()


def test_without_the_token_reflection_is_refused_but_on_a_socket_torchmond_accepts(token_daemon):
    """gRPC checks reflection's token in its transport, which does not run
    on the Unix connections torchmond accepts itself (--peer-labels, on by
    default): there it answers, with the schema the .proto publishes
    (docs/security.md, "Bearer token")."""
    with grpc.insecure_channel(token_daemon.tcp_target) as tcp:
        with pytest.raises(grpc.RpcError) as error:
            list_services(tcp)
        assert error.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "bearer token" in error.value.details()
    with grpc.insecure_channel(token_daemon.target) as unix:
        assert "torchmon.v1.Query" in list_services(unix)


def test_with_the_token_as_grpcurl_sends_it_everything_works(token_channel):
    metadata = [("authorization", f"Bearer {TOKEN}")]
    assert "torchmon.v1.Query" in list_services(token_channel, metadata)
    assert health_check(token_channel, "", metadata) == SERVING
    pool = load_symbol(token_channel, "torchmon.v1.Query", metadata)
    assert call(token_channel, pool, "torchmon.v1.Query", "ListSeries", {}, metadata) == {}
