"""`connect()`: nothing configured is None; a context is used only when named or the only one;
flags override the config file; the official client is imported only when a cluster is used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from runbook.backends.kubernetes.connect import _service_account_namespace, connect
from runbook.config import EMPTY, Config
from runbook.errors import InvalidInput


def _kubeconfig(path, contexts, current=None, namespaces=None):
    namespaces = namespaces or {}
    doc = {"apiVersion": "v1", "kind": "Config",
           "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
           "users": [{"name": "u", "user": {"token": "t"}}],
           "contexts": [{"name": n, "context": {"cluster": "c", "user": "u",
                                                **({"namespace": namespaces[n]} if n in namespaces else {})}}
                        for n in contexts]}
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_nothing_configured_is_none_and_imports_no_client():
    code = ("import sys; from runbook.backends.kubernetes.connect import connect; from runbook.config import EMPTY\n"
            "assert connect(EMPTY) is None\nprint('kubernetes' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert out.stdout.strip() == "False"


def test_several_contexts_and_none_named_is_refused_even_with_a_current_context(tmp_path):
    path = _kubeconfig(tmp_path / "kc", ["prod-eu", "prod-us", "staging"], current="prod-eu")
    with pytest.raises(InvalidInput, match=r"3 contexts \(prod-eu, prod-us, staging\) and none was named: pass --context"):
        connect(EMPTY, kubeconfig=path)


def test_the_only_context_is_used_and_described(tmp_path):
    path = _kubeconfig(tmp_path / "kc", ["only"])
    cluster = connect(EMPTY, kubeconfig=path)
    try:
        assert cluster.describe() == "context only at https://127.0.0.1:6443"
    finally:
        cluster.close()


def test_a_named_context_must_exist(tmp_path):
    path = _kubeconfig(tmp_path / "kc", ["a", "b"])
    with pytest.raises(InvalidInput, match=r"context 'c' is not in the kubeconfig .* \(contexts: a, b\)"):
        connect(EMPTY, kubeconfig=path, context="c")


def test_flags_override_the_config_file(tmp_path):
    path = _kubeconfig(tmp_path / "kc", ["a", "b"])
    config = Config(None, {"kubernetes": {"kubeconfig": path, "context": "a", "request_timeout": 3}})
    for flag, expected in ((None, "a"), ("b", "b")):
        cluster = connect(config, context=flag)
        try:
            assert cluster.describe().startswith(f"context {expected} ")
            assert cluster.settings.request_timeout == 3
        finally:
            cluster.close()


def test_kubeconfig_lists_are_merged_like_kubectl(tmp_path):
    first, second = _kubeconfig(tmp_path / "one", ["a"]), _kubeconfig(tmp_path / "two", ["b"])
    with pytest.raises(InvalidInput, match=r"2 contexts \(a, b\)"):
        connect(EMPTY, kubeconfig=f"{first}{os.pathsep}{second}")
    cluster = connect(EMPTY, kubeconfig=f"{first}{os.pathsep}{second}", context="b")
    cluster.close()


def test_a_config_section_alone_means_the_default_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(InvalidInput, match=r"kubeconfig .*\.kube/config does not exist"):
        connect(Config(None, {"kubernetes": {}}))


def test_in_cluster_is_explicit_and_exclusive(tmp_path, monkeypatch):
    path = _kubeconfig(tmp_path / "kc", ["a"])
    with pytest.raises(InvalidInput, match="not both"):
        connect(EMPTY, kubeconfig=path, in_cluster=True)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(InvalidInput, match="--in-cluster: .*run runbook in a pod"):
        connect(EMPTY, in_cluster=True)


def test_the_config_section_is_validated(tmp_path):
    with pytest.raises(InvalidInput, match="contxt"):
        connect(Config(None, {"kubernetes": {"contxt": "a"}}))
    with pytest.raises(InvalidInput, match="request_timeout"):
        connect(Config(None, {"kubernetes": {"request_timeout": 0}}))


def test_the_namespace_without_n_is_the_contexts_else_default_as_in_kubectl(tmp_path):
    first = _kubeconfig(tmp_path / "one", ["serving", "plain"], namespaces={"serving": "llm"})
    # The first file that names a context wins, its namespace with it (kubectl's merge).
    second = _kubeconfig(tmp_path / "two", ["serving"], namespaces={"serving": "elsewhere"})
    for context, expected in (("serving", "llm"), ("plain", "default")):
        cluster = connect(EMPTY, kubeconfig=f"{first}{os.pathsep}{second}", context=context)
        try:
            assert cluster.default_namespace == expected
        finally:
            cluster.close()


def test_in_cluster_the_namespace_is_the_pods_own(tmp_path):
    written = tmp_path / "namespace"
    written.write_text("llm\n")
    assert _service_account_namespace(written) == "llm"
    assert _service_account_namespace(tmp_path / "absent") == "default"
