"""The `nodes:` section and name resolution, without a server: what reaches which host, as whom."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pydantic
import pytest

from runbook.actions.node import FUSER_NVIDIA
from runbook.backends.ssh import nodes as ssh
from runbook.backends.ssh.inventory import Inventory, NodesSection
from runbook.backends.ssh.session import command_line
from runbook.config import Config, load_config
from runbook.errors import InvalidInput


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    (tmp_path / "id_runbook").write_text("not read until a connection is made\n")
    (tmp_path / "known_hosts").write_text("")
    return {"key_file": str(tmp_path / "id_runbook"), "known_hosts": str(tmp_path / "known_hosts")}


def inventory(section: dict, *, server_mode: bool = True, home: Path | None = None) -> Inventory:
    return Inventory(NodesSection.model_validate(section), server_mode=server_mode, home=home or Path("/nonexistent"))


def test_no_nodes_section_means_no_backend():
    assert ssh.connect(Config(None, {}), server_mode=False, cluster=None) is None


def test_a_bad_section_is_reported_at_its_place_in_the_file(tmp_path, files):
    config = tmp_path / "runbook.yaml"
    config.write_text(f"nodes:\n  key_file: {files['key_file']}\n  inventory:\n    gpu-node-2:\n      hots: 10.0.0.2\n"
                      "      port: 70000\n")
    with pytest.raises(InvalidInput) as err:
        ssh.connect(load_config(config), server_mode=True, cluster=None)
    message = str(err.value)
    assert f"{config}:5:" in message and "hots" in message
    assert f"{config}:6:" in message and "port" in message


def test_a_nodes_section_that_is_no_mapping_is_refused(tmp_path):
    config = tmp_path / "runbook.yaml"
    config.write_text("nodes: [gpu-node-2, gpu-node-3]\n")
    with pytest.raises(InvalidInput, match="must be a mapping"):
        ssh.connect(load_config(config), server_mode=False, cluster=None)


def test_connect_builds_the_backend_without_touching_the_network(tmp_path, files):
    config = tmp_path / "runbook.yaml"
    config.write_text(f"nodes:\n  key_file: {files['key_file']}\n  known_hosts: {files['known_hosts']}\n"
                      f"  user: runbook\n  inventory:\n    gpu-node-2: {{host: 192.0.2.12}}\n")
    nodes = ssh.connect(load_config(config), server_mode=True, cluster=None)
    assert isinstance(nodes, ssh.SshNodes)
    target = nodes.resolve("gpu-node-2")
    assert (target.hop.host, target.hop.port, target.hop.user) == ("192.0.2.12", 22, "runbook")
    nodes.close()


def test_a_missing_key_or_known_hosts_file_is_a_config_error(tmp_path, files):
    with pytest.raises(InvalidInput, match=r"nodes.key_file: .*missing does not exist"):
        inventory({**files, "key_file": str(tmp_path / "missing"), "inventory": {"a": {}}})
    with pytest.raises(InvalidInput, match=r"nodes.inventory.a.known_hosts: .*nope does not exist"):
        inventory({**files, "inventory": {"a": {"known_hosts": str(tmp_path / "nope")}}})


def test_kubernetes_names_globs_and_exact_names(files):
    inv = inventory({**files, "user": "runbook", "inventory": {
        "gpu-2": {"host": "10.0.3.12", "kubernetes_node": "ip-10-0-3-12.ec2.internal"},
        "gpu-a100-7": {"host": "10.0.9.7", "port": 2222},
        "gpu-a100-*": {"host": "{name}.gpu.internal"},
    }})
    assert inv.resolve("ip-10-0-3-12.ec2.internal").hop.host == "10.0.3.12"
    assert inv.resolve("gpu-2").hop.host == "10.0.3.12"
    assert (inv.resolve("gpu-a100-7").hop.host, inv.resolve("gpu-a100-7").hop.port) == ("10.0.9.7", 2222)
    assert inv.resolve("gpu-a100-3").hop.host == "gpu-a100-3.gpu.internal"
    with pytest.raises(InvalidInput, match=r"'gpu-h100-1' is not in the nodes inventory .*gpu-a100-\*"):
        inv.resolve("gpu-h100-1")


@pytest.mark.parametrize("name", ["GPU-2", "gpu-2; id", "$(id)", "-oProxyCommand=id", "", "a" * 300])
def test_names_that_are_no_node_names_are_refused(files, name):
    inv = inventory({**files, "inventory": {"*": {}}})
    with pytest.raises(InvalidInput, match="not a valid node name"):
        inv.resolve(name)


@pytest.mark.parametrize(("field", "value"), [("host", "-oProxyCommand=id"), ("host", "a b"), ("user", "root; id"),
                                               ("jump", "bastion;id"), ("kubernetes_node", "Not_A_Name")])
def test_values_that_could_be_read_as_options_or_commands_are_refused(files, field, value):
    with pytest.raises(pydantic.ValidationError, match="not"):
        NodesSection.model_validate({**files, "inventory": {"a": {field: value}}})


def test_a_kubernetes_name_may_point_at_one_entry_only(files):
    with pytest.raises(pydantic.ValidationError, match="also names"):
        NodesSection.model_validate({**files, "inventory": {"a": {"kubernetes_node": "n1"}, "b": {"kubernetes_node": "n1"}}})


def test_server_mode_needs_an_explicit_key_and_known_hosts(files):
    with pytest.raises(InvalidInput, match="no SSH key for node 'a' in server mode"):
        inventory({"known_hosts": files["known_hosts"], "user": "u", "inventory": {"a": {}}}).resolve("a")
    with pytest.raises(InvalidInput, match="no known_hosts file for node 'a' in server mode"):
        inventory({"key_file": files["key_file"], "user": "u", "inventory": {"a": {}}}).resolve("a")


def _home_with_ssh_config(tmp_path: Path, text: str) -> Path:
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    (tmp_path / "home" / ".ssh" / "config").write_text(text)
    return tmp_path / "home"


def test_the_users_ssh_config_is_read_by_the_cli_and_not_by_the_server(tmp_path, files):
    home = _home_with_ssh_config(tmp_path, "Host gpu-2\n  HostName 10.1.1.2\n  User alice\n  Port 2200\n")
    section = {**files, "inventory": {"gpu-2": {}}}
    cli = inventory(section, server_mode=False, home=home).resolve("gpu-2").hop
    assert (cli.host, cli.port, cli.user) == ("10.1.1.2", 2200, "alice")
    server = inventory({**section, "user": "runbook"}, server_mode=True, home=home).resolve("gpu-2").hop
    assert (server.host, server.port, server.user) == ("gpu-2", 22, "runbook")


def test_runbooks_config_wins_over_the_ssh_config(tmp_path, files):
    home = _home_with_ssh_config(tmp_path, "Host *\n  User alice\n  Port 2200\n  IdentityFile ~/.ssh/id_alice\n"
                                           "  UserKnownHostsFile ~/.ssh/other_known_hosts\n")
    hop = inventory({**files, "user": "runbook", "inventory": {"gpu-2": {"port": 22}}}, server_mode=False,
                    home=home).resolve("gpu-2").hop
    assert (hop.user, hop.port, hop.key_files, hop.known_hosts) == ("runbook", 22, (files["key_file"],),
                                                                    (files["known_hosts"],))


def test_cli_mode_falls_back_to_the_users_known_hosts(tmp_path):
    home = _home_with_ssh_config(tmp_path, "")
    (home / ".ssh" / "known_hosts").write_text("")
    hop = inventory({"inventory": {"gpu-2": {}}}, server_mode=False, home=home).resolve("gpu-2").hop
    assert hop.known_hosts == (str(home / ".ssh" / "known_hosts"),) and hop.key_files == ()


def test_a_proxy_command_is_refused(tmp_path, files):
    home = _home_with_ssh_config(tmp_path, "Host gpu-*\n  ProxyCommand nc %h %p\n")
    with pytest.raises(InvalidInput, match="ProxyCommand"):
        inventory({**files, "inventory": {"gpu-2": {}}}, server_mode=False, home=home).resolve("gpu-2")


def test_jump_chains_connect_outermost_first_and_never_loop(files):
    inv = inventory({**files, "user": "u", "inventory": {
        "edge": {"host": "198.51.100.1"},
        "bastion": {"host": "10.0.0.1", "jump": "edge"},
        "gpu-2": {"host": "10.0.3.12", "jump": "bastion"},
        "gpu-3": {"host": "10.0.3.13", "jump": "ops@203.0.113.9:2022"},
        "loop-a": {"jump": "loop-b"}, "loop-b": {"jump": "loop-a"},
    }})
    assert [h.host for h in inv.resolve("gpu-2").jumps] == ["198.51.100.1", "10.0.0.1"]
    (hop,) = inv.resolve("gpu-3").jumps
    assert (hop.user, hop.host, hop.port) == ("ops", "203.0.113.9", 2022)
    with pytest.raises(InvalidInput, match="loop"):
        inv.resolve("loop-a")


def test_a_section_wide_jump_serves_the_nodes_not_the_jump_host_itself(files):
    inv = inventory({**files, "user": "u", "jump": "bastion", "inventory": {
        "bastion": {"host": "10.0.0.1"}, "gpu-2": {"host": "10.0.3.12"}, "gpu-9": {"host": "10.0.3.19", "jump": "none"}}})
    assert [h.label for h in inv.resolve("gpu-2").jumps] == ["bastion"]
    assert inv.resolve("gpu-9").jumps == ()


def test_the_command_line_quotes_every_word_and_keeps_the_fuser_glob_for_the_remote_sh():
    assert command_line(["nvidia-smi", "-i", "$(id)"], timeout=20, kill_after=2, remote_timeout=False) == \
        "nvidia-smi -i '$(id)'"
    assert command_line(FUSER_NVIDIA, timeout=19.2, kill_after=2, remote_timeout=True) == \
        "exec timeout -k 2 20 sh -c 'fuser -v /dev/nvidia* 2>&1'"


def test_loading_the_backend_does_not_load_paramiko():
    code = "import sys, runbook.backends.ssh.nodes; print('paramiko' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
