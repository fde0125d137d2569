"""kwok's configuration for the control plane: how its nodes and pods move (our own stages), and
where their logs go (per-container log files under `pods_dir`).

kwok reads the stages from its config file; the logs are objects in the API (its CRDs), so a test
can name a pod the controllers made: pods named in `named_pods` (or later by `pod_documents`) get
logs of their own; any other pod gets its namespace's. Exec does not go to kwok: the nodes'
kubelet endpoint is kubeletfront (kwok/kubeletfront), which runs the stand-in tools itself and
hands the rest to kwok.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

API = "kwok.x-k8s.io/v1alpha1"
KUBELET_VERSION = "v1.36.3"

NODE_READY = r"""
{{ $now := Now }}
conditions:
- {type: Ready, status: "True", reason: KubeletReady, message: "kubelet is posting ready status",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
- {type: MemoryPressure, status: "False", reason: KubeletHasSufficientMemory, message: "",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
- {type: DiskPressure, status: "False", reason: KubeletHasNoDiskPressure, message: "",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
- {type: PIDPressure, status: "False", reason: KubeletHasSufficientPID, message: "",
   lastHeartbeatTime: {{ $now | Quote }}, lastTransitionTime: {{ $now | Quote }}}
addresses:
- {type: InternalIP, address: {{ NodeIP | Quote }}}
- {type: Hostname, address: {{ .metadata.name | Quote }}}
daemonEndpoints:
  kubeletEndpoint:
    Port: {{ NodePort }}
capacity: {cpu: "64", memory: 1Ti, pods: "110", "nvidia.com/gpu": "8"}
allocatable: {cpu: "63", memory: 1000Gi, pods: "110", "nvidia.com/gpu": "8"}
nodeInfo:
  architecture: amd64
  operatingSystem: linux
  kubeletVersion: @VERSION@
  kubeProxyVersion: @VERSION@
  containerRuntimeVersion: containerd://2.1.0
  kernelVersion: 6.8.0-gpu
  osImage: Ubuntu 24.04 LTS
  machineID: {{ .metadata.uid | Quote }}
  systemUUID: {{ .metadata.uid | Quote }}
  bootID: {{ .metadata.uid | Quote }}
phase: Running
""".replace("@VERSION@", KUBELET_VERSION)

POD_RUNNING = r"""
{{ $now := Now }}
{{ $root := . }}
conditions:
- {type: PodReadyToStartContainers, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: Ready, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: ContainersReady, status: "True", lastTransitionTime: {{ $now | Quote }}}
- {type: PodScheduled, status: "True", lastTransitionTime: {{ $now | Quote }}}
containerStatuses:
{{ range .spec.containers }}
- name: {{ .name | Quote }}
  image: {{ .image | Quote }}
  imageID: {{ printf "%s@sha256:%s" .image (sha256sum .image) | Quote }}
  containerID: {{ printf "containerd://%s" (sha256sum (printf "%s/%s" $root.metadata.uid .name)) | Quote }}
  ready: true
  started: true
  restartCount: 0
  state:
    running:
      startedAt: {{ $now | Quote }}
{{ end }}
{{ with NodeIPWith .spec.nodeName }}
hostIP: {{ . | Quote }}
hostIPs:
- ip: {{ . | Quote }}
{{ end }}
{{ with PodIPWith .spec.nodeName false .metadata.uid .metadata.name .metadata.namespace }}
podIP: {{ . | Quote }}
podIPs:
- ip: {{ . | Quote }}
{{ end }}
phase: Running
startTime: {{ $now | Quote }}
"""


def _stage(name: str, kind: str, expressions: list[dict], nxt: dict) -> dict:
    return {"apiVersion": API, "kind": "Stage", "metadata": {"name": name},
            "spec": {"resourceRef": {"apiGroup": "v1", "kind": kind},
                     "selector": {"matchExpressions": expressions}, "next": nxt}}


def _with_delay(stage: dict, milliseconds: int) -> dict:
    stage["spec"]["delay"] = {"durationMilliseconds": milliseconds}
    return stage


def stages() -> list[dict]:
    """A node turns Ready with GPUs; a scheduled pod runs, ready at once; a deleted pod goes two
    seconds later, as its containers stop."""
    not_ready = {"key": '.status.conditions.[] | select( .type == "Ready" ) | .status', "operator": "NotIn",
                 "values": ["True"]}
    return [
        _stage("runbook-node-ready", "Node", [not_ready], {"statusTemplate": NODE_READY}),
        _stage("runbook-pod-running", "Pod", [
            {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
            {"key": ".status.phase", "operator": "In", "values": ["Pending"]},
            not_ready,
        ], {"statusTemplate": POD_RUNNING}),
        _with_delay({**_stage("runbook-pod-delete", "Pod", [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}],
                  {"delete": True}),
         # A kubelet stops the containers first: the pod is listed as terminating meanwhile.
         }, 2000),
    ]


def log_file(pods_dir: Path, namespace: str, pod: str | None, *, previous: bool = False) -> Path:
    """Where a pod's container log lies (CRI format: `TIME stdout F LINE`); `pod=None`: the namespace's."""
    name = "previous.log" if previous else "current.log"
    return pods_dir / namespace / (pod or "_any") / name


def pod_documents(pods_dir: Path, namespace: str, pod: str) -> list[dict]:
    """A Logs of kwok's for one pod, named after it."""
    meta = {"name": pod, "namespace": namespace}
    return [{"apiVersion": API, "kind": "Logs", "metadata": meta, "spec": {"logs": [{
                "logsFile": str(log_file(pods_dir, namespace, pod)),
                "previousLogsFile": str(log_file(pods_dir, namespace, pod, previous=True))}]}}]


def namespace_documents(pods_dir: Path, namespaces: Iterable[str]) -> list[dict]:
    """A ClusterLogs per namespace, for the pods no Logs names."""
    docs: list[dict] = []
    for namespace in namespaces:
        selector = {"matchNamespaces": [namespace]}
        docs.append({"apiVersion": API, "kind": "ClusterLogs", "metadata": {"name": f"logs-{namespace}"},
                     "spec": {"selector": selector, "logs": [{
                         "logsFile": str(log_file(pods_dir, namespace, None)),
                         "previousLogsFile": str(log_file(pods_dir, namespace, None, previous=True))}]}})
    return docs


def write_config(path: Path, *, pki, server_port: int, kubelet_port: int) -> Path:
    """kwok serves on `server_port`; its nodes name `kubelet_port` (kubeletfront's) as their kubelet's."""
    configuration = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
        "options": {
            "manageAllNodes": False,
            "manageNodesWithLabelSelector": "type=kwok",
            "nodeIP": "127.0.0.1", "nodePort": kubelet_port,
            "serverAddress": f"127.0.0.1:{server_port}",
            "tlsCertFile": str(pki.kubelet_serving.cert), "tlsPrivateKeyFile": str(pki.kubelet_serving.key),
            "cidr": "127.244.0.0/16",
            "nodeLeaseDurationSeconds": 40,
            # Given explicitly: kwok leaves them 0 (and refuses to start) when its config file is read.
            "podPlayStageParallelism": 4, "nodePlayStageParallelism": 4, "nodeLeaseParallelism": 4,
            "podsOnNodeSyncParallelism": 1,
            "enableCRDs": ["Logs", "ClusterLogs"],
            "enableDebuggingHandlers": True,  # logs: what the apiserver proxies to a kubelet (via kubeletfront)
        },
    }
    docs = [configuration, *stages()]
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False), encoding="utf-8")
    return path
