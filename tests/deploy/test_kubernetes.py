"""deploy/kubernetes, checked without kubectl or a cluster: every document
parses and names itself, the fields each kind needs are there (and no
misspelt ones where a typo would be silently ignored), and the manifests
agree with each other, with the configuration and with the image."""

import glob
import os
import re

import pytest
import yaml

from conftest import DEPLOY, KUBERNETES, config_settings, duration_s

API_VERSIONS = {
    "Namespace": "v1", "ServiceAccount": "v1", "ConfigMap": "v1", "Service": "v1",
    "DaemonSet": "apps/v1", "Job": "batch/v1", "PodMonitor": "monitoring.coreos.com/v1",
}
NAMESPACED = set(API_VERSIONS) - {"Namespace"}
# Fields of the Kubernetes API (v1.28) that these manifests may use: a key
# outside these sets is a typo the API server would drop or refuse.
CONTAINER_KEYS = {"name", "image", "imagePullPolicy", "command", "args", "env", "ports",
                  "livenessProbe", "readinessProbe", "startupProbe", "resources",
                  "securityContext", "volumeMounts", "workingDir"}
POD_SPEC_KEYS = {"serviceAccountName", "automountServiceAccountToken", "hostNetwork",
                 "terminationGracePeriodSeconds", "tolerations", "securityContext",
                 "initContainers", "containers", "volumes", "restartPolicy", "nodeSelector",
                 "priorityClassName", "affinity"}
CONTAINER_SECURITY_KEYS = {"runAsUser", "runAsGroup", "runAsNonRoot", "allowPrivilegeEscalation",
                           "readOnlyRootFilesystem", "capabilities", "privileged",
                           "seccompProfile"}
POD_SECURITY_KEYS = {"runAsUser", "runAsGroup", "runAsNonRoot", "supplementalGroups",
                     "fsGroup", "seccompProfile"}
PROBE_KEYS = {"httpGet", "periodSeconds", "timeoutSeconds", "failureThreshold",
              "successThreshold", "initialDelaySeconds"}


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


ALL_FILES = sorted(glob.glob(os.path.join(KUBERNETES, "**", "*.yaml"), recursive=True))
MANIFESTS = [p for p in ALL_FILES if os.path.basename(p) != "kustomization.yaml"]


@pytest.fixture(scope="module")
def objects():
    """kind -> the one object of that kind (each appears once)."""
    by_kind = {}
    for path in MANIFESTS:
        for doc in load(path):
            assert doc["kind"] not in by_kind, f"{path}: a second {doc['kind']}"
            by_kind[doc["kind"]] = doc
    return by_kind


@pytest.fixture(scope="module")
def pod(objects):
    return objects["DaemonSet"]["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def daemon(pod):
    (container,) = pod["containers"]
    return container


@pytest.fixture(scope="module")
def conf(objects):
    return config_settings(objects["ConfigMap"]["data"]["torchmond.conf"])


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: os.path.relpath(p, KUBERNETES))
def test_every_document_parses_and_names_itself(path):
    docs = load(path)
    assert docs, f"{path}: no document"
    for doc in docs:
        assert isinstance(doc, dict)
        assert doc.get("apiVersion") and doc.get("kind"), doc
        if doc["kind"] == "Kustomization":
            continue
        assert doc.get("metadata", {}).get("name"), f"{path}: {doc['kind']} without a name"
        assert doc["apiVersion"] == API_VERSIONS[doc["kind"]], f"{path}: {doc['kind']}"


def test_namespaced_objects_are_in_the_namespace(objects):
    namespace = objects["Namespace"]["metadata"]["name"]
    for kind, doc in objects.items():
        if kind in NAMESPACED and kind != "Job":  # the example job runs in the user's own
            assert doc["metadata"].get("namespace") == namespace, kind


def check_pod_spec(spec, where):
    assert not set(spec) - POD_SPEC_KEYS, (where, set(spec) - POD_SPEC_KEYS)
    assert not set(spec.get("securityContext", {})) - POD_SECURITY_KEYS, where
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for container in spec.get("initContainers", []) + spec["containers"]:
        name = f"{where}/{container['name']}"
        assert container.get("image"), name
        assert not set(container) - CONTAINER_KEYS, (name, set(container) - CONTAINER_KEYS)
        assert not set(container.get("securityContext", {})) - CONTAINER_SECURITY_KEYS, name
        for mount in container.get("volumeMounts", []):
            assert mount["name"] in volumes, f"{name}: no volume {mount['name']}"
        ports = {p["name"] for p in container.get("ports", [])}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container:
                assert not set(container[probe]) - PROBE_KEYS, (name, probe)
                port = container[probe]["httpGet"]["port"]
                assert port in ports, f"{name}: {probe} on a port it does not declare"


def test_pod_specs_use_known_fields_and_declared_volumes_and_ports(objects):
    check_pod_spec(objects["DaemonSet"]["spec"]["template"]["spec"], "DaemonSet")
    check_pod_spec(objects["Job"]["spec"]["template"]["spec"], "Job")
    assert objects["Job"]["spec"]["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")


def test_selectors_match_the_daemonset_pods(objects, daemon):
    ds = objects["DaemonSet"]
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    selectors = {
        "DaemonSet": ds["spec"]["selector"]["matchLabels"],
        "Service": objects["Service"]["spec"]["selector"],
        "PodMonitor": objects["PodMonitor"]["spec"]["selector"]["matchLabels"],
    }
    for kind, selector in selectors.items():
        assert selector and selector.items() <= pod_labels.items(), kind
    monitor = objects["PodMonitor"]["spec"]
    assert ds["metadata"]["namespace"] in monitor["namespaceSelector"]["matchNames"]
    ports = {p["name"]: p["containerPort"] for p in daemon["ports"]}
    assert objects["Service"]["spec"]["clusterIP"] == "None"  # headless
    for port in objects["Service"]["spec"]["ports"]:
        assert ports[port["targetPort"]] == port["port"]
    for endpoint in monitor["podMetricsEndpoints"]:
        assert endpoint["port"] in ports and endpoint["path"] == "/metrics"


def test_probes_ask_healthz_on_the_configured_metrics_port(daemon, conf):
    host, port = conf["metrics-listen"][0].rsplit(":", 1)
    # The kubelet probes the pod's address, Prometheus scrapes it: not loopback.
    assert host not in ("127.0.0.1", "localhost", "")
    ports = {p["name"]: p["containerPort"] for p in daemon["ports"]}
    assert ports["metrics"] == int(port)
    for probe in ("livenessProbe", "readinessProbe"):
        assert daemon[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_daemonset_is_locked_down_and_bounded(objects, pod, daemon, conf):
    spec = objects["DaemonSet"]["spec"]
    assert spec["updateStrategy"]["type"] == "RollingUpdate"
    assert spec["updateStrategy"]["rollingUpdate"]["maxUnavailable"] >= 1
    assert pod["hostNetwork"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == objects["ServiceAccount"]["metadata"]["name"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["terminationGracePeriodSeconds"] > duration_s(conf["drain-timeout"][0])
    security = daemon["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert "runAsUser" not in security  # the pod's non-root user
    for key in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(daemon["resources"][key]), key
    config_volume = {v["name"]: v for v in pod["volumes"]}["config"]
    assert config_volume["configMap"]["name"] == objects["ConfigMap"]["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}
    assert daemon["args"] == ["--config", mounts["config"] + "/torchmond.conf"]


def test_daemon_and_training_pods_share_the_socket_directory(objects, pod, daemon, conf):
    socket = conf["listen"][0]
    assert socket.startswith("unix://")
    socket_dir = os.path.dirname(socket[len("unix://"):])
    daemon_volume = {v["name"]: v for v in pod["volumes"]}
    daemon_mounts = {m["mountPath"]: m for m in daemon["volumeMounts"]}
    host_path = daemon_volume[daemon_mounts[socket_dir]["name"]]["hostPath"]

    job = objects["Job"]["spec"]["template"]["spec"]
    (train,) = job["containers"]
    env = {e["name"]: e["value"] for e in train["env"]}
    assert env["TORCHMON_TARGET"] == socket
    job_mounts = {m["mountPath"]: m for m in train["volumeMounts"]}
    job_mount = job_mounts[socket_dir]
    assert job_mount["readOnly"] is True
    job_volume = {v["name"]: v for v in job["volumes"]}[job_mount["name"]]
    assert job_volume["hostPath"]["path"] == host_path["path"]
    assert host_path["type"] == job_volume["hostPath"]["type"] == "DirectoryOrCreate"


def test_one_uid_and_gid_across_image_daemonset_init_and_training_pods(objects, pod, conf):
    with open(os.path.join(DEPLOY, "container", "Dockerfile")) as f:
        dockerfile = f.read()
    uid, gid = re.search(r"^USER (\d+):(\d+)$", dockerfile, re.M).groups()
    assert re.search(rf"groupadd --system --gid {gid} {conf['socket-group'][0]}\b", dockerfile)
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsGroup"] == int(gid)
    (init,) = pod["initContainers"]
    script = init["command"][-1]
    assert f"chown {uid}:{gid} /run/torchmon" in script
    assert "chmod 0710 /run/torchmon" in script  # docs/security.md: group may only enter
    assert init["securityContext"]["capabilities"] == {"drop": ["ALL"],
                                                       "add": ["CHOWN", "FOWNER"]}
    assert init["securityContext"]["allowPrivilegeEscalation"] is False
    job = objects["Job"]["spec"]["template"]["spec"]
    assert int(gid) in job["securityContext"]["supplementalGroups"]


def test_kustomization_lists_every_manifest_and_the_image(objects, daemon):
    (kustomization,) = load(os.path.join(KUBERNETES, "kustomization.yaml"))
    assert kustomization["kind"] == "Kustomization"
    top_level = sorted(os.path.basename(p) for p in MANIFESTS
                       if os.path.dirname(p) == KUBERNETES)
    assert sorted(kustomization["resources"]) == top_level
    images = {i["name"] for i in kustomization["images"]}
    assert daemon["image"].split(":")[0] in images
