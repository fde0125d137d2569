"""The signal catalog: bundled profiles, the config file's overrides, and safe PromQL building."""

from __future__ import annotations

import pytest

from runbook.config import load_config
from runbook.errors import InvalidInput
from runbook.loading import validation
from runbook.actions import load_builtin
from runbook.signals import promql
from runbook.signals.catalog import build_catalog, bundled_profiles


def config_file(tmp_path, text: str):
    path = tmp_path / "runbook.yaml"
    path.write_text(text)
    return load_config(path)


def playbook_signals() -> set[str]:
    """Every signal a bundled playbook names: in `detect` and in its steps' params."""
    registry = load_builtin()
    names = set()
    for path in validation.discover([validation.bundled_dir()]):
        book = validation.load_playbook_file(path, registry).playbook
        assert book is not None
        if book.detect:
            names.add(book.detect.signal)
        names |= {s.with_["signal"] for s in book.steps
                  if (s.uses.startswith("prom.") or s.uses == "flow.verify") and "signal" in s.with_}
    return names


@pytest.mark.parametrize("profile", ["vllm", "article"])
def test_bundled_profiles_know_every_signal_the_playbooks_use(profile):
    catalog = build_catalog(profile=profile)
    assert playbook_signals() <= set(catalog.names())


def test_bundled_profiles_are_listed():
    assert {"vllm", "article"} <= set(bundled_profiles())


def test_labels_become_matchers_and_by_an_outer_aggregation():
    catalog = build_catalog()
    assert catalog.render("waiting_requests") == "sum(vllm:num_requests_waiting)"
    assert (catalog.render("waiting_requests", {"namespace": "llm"}, ["pod"])
            == 'sum by (pod) (vllm:num_requests_waiting{namespace="llm"})')
    # The renamed metric of older vLLM stays a fallback.
    assert catalog.render("kv_cache_usage", {"namespace": "llm"}) == (
        'max(vllm:kv_cache_usage_perc{namespace="llm"} or vllm:gpu_cache_usage_perc{namespace="llm"})')


def test_histogram_signals_group_inside_the_quantile_too():
    expr = build_catalog().render("prefill_latency_p99_seconds", {"namespace": "llm"}, ["pod"])
    assert expr == ('max by (pod) (histogram_quantile(0.99, sum by (pod,le) (rate(vllm:time_to_first_token_seconds_'
                    'bucket{namespace="llm"}[5m]))))')


def test_dcgm_labels_are_mapped_to_the_playbooks_names_and_back():
    expr = build_catalog().render("gpu_memory_used_ratio", {"node": "gpu-node-2"}, ["node", "gpu"])
    assert 'DCGM_FI_DEV_FB_USED{Hostname="gpu-node-2"}' in expr
    assert expr.startswith('max by (node, gpu) (label_replace(')
    assert expr.endswith(', "node", "$1", "Hostname", "(.*)"))')


@pytest.mark.parametrize("value", ['llm"} or vector(1) #', "llm,x", "a b", "{x}", "x\\", "é"])
def test_label_values_that_could_break_out_of_a_matcher_are_refused(value):
    with pytest.raises(InvalidInput, match="not allowed in a matcher value"):
        build_catalog().render("waiting_requests", {"namespace": value})


@pytest.mark.parametrize("name", ["namespace=", "1pod", "a-b", ""])
def test_bad_label_names_are_refused(name):
    with pytest.raises(InvalidInput, match="not a valid Prometheus label name"):
        build_catalog().render("waiting_requests", {name: "x"})
    with pytest.raises(InvalidInput):
        build_catalog().render("waiting_requests", by=[name])


def test_unknown_signal_names_the_closest_one():
    with pytest.raises(InvalidInput, match="did you mean `waiting_requests`"):
        build_catalog().render("waiting_request")


def test_config_picks_the_profile_sets_params_and_overrides_a_signal(tmp_path):
    config = config_file(tmp_path, """\
signals:
  profile: article
  params: {selector: 'job="vllm-custom"', window: 2m}
  overrides:
    http_503_per_min:
      labels: {namespace: exported_namespace}
    waiting_requests: 'my_queue_depth{{labels}{selector}}'
    cold_pods:
      aggregate: min
      expr: 'vllm_kv_cache_usage_ratio{{labels}} < 0.6'
""")
    catalog = build_catalog(config)
    assert catalog.profile == "article"
    assert catalog.render("waiting_requests", {"namespace": "llm"}) == (
        'sum(my_queue_depth{namespace="llm",job="vllm-custom"})')
    assert catalog.get("waiting_requests").origin == "config file"
    assert "exported_namespace=\"llm\"" in catalog.render("http_503_per_min", {"namespace": "llm"})
    assert "[2m]" in catalog.render("oom_failures_per_min")
    assert catalog.render("cold_pods") == "min(vllm_kv_cache_usage_ratio < 0.6)"
    # Inherited from `vllm`, which the article profile extends.
    assert catalog.get("gpu_memory_used_ratio").origin == "profile vllm"


def test_config_problems_are_located_in_the_file_with_a_fix(tmp_path):
    config = config_file(tmp_path, """\
signals:
  params:
    windw: 2m
    selector: 'job=vllm'
  overrides:
    waiting_requests: 'vllm:num_requests_waiting{{labels}{selectr}}'
    brand_new: 'x{{labels}}'
""")
    with pytest.raises(InvalidInput) as caught:
        build_catalog(config)
    text = str(caught.value)
    assert "4 problem(s)" in text
    assert f"{config.path}:3:5  signals.params.windw" in text and "did you mean `window`?" in text
    assert f"{config.path}:4:15  signals.params.selector" in text and "not a list of label matchers" in text
    assert "signals.overrides.waiting_requests.expr" in text and "did you mean `selector`?" in text
    assert "`brand_new` is not a signal of profile vllm, so it needs both `expr` and `aggregate`" in text


def test_config_shape_errors_come_from_the_config_loader(tmp_path):
    config = config_file(tmp_path, "signals:\n  profil: article\n")
    with pytest.raises(InvalidInput, match=r"runbook.yaml:2:3  signals.profil"):
        build_catalog(config)


def test_a_profile_file_of_your_own_can_extend_a_bundled_one(tmp_path):
    (tmp_path / "mine.yaml").write_text("""\
name: mine
extends: vllm
params:
  tenant: {kind: value, default: team-a}
signals:
  waiting_requests:
    aggregate: sum
    expr: 'vllm:num_requests_waiting{{labels}tenant="{tenant}"}'
""")
    config = config_file(tmp_path, f"signals: {{profile: {tmp_path / 'mine.yaml'}}}\n")
    catalog = build_catalog(config)
    assert catalog.render("waiting_requests") == 'sum(vllm:num_requests_waiting{tenant="team-a"})'
    # A caller's label of a `value` param's name fills the param instead of adding a matcher.
    assert catalog.render("waiting_requests", {"tenant": "team-b"}) == 'sum(vllm:num_requests_waiting{tenant="team-b"})'


def test_a_broken_profile_file_is_reported_with_its_locations(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: bad\nsignals:\n  x:\n    aggregate: median\n    expr: 'y{{labels}{nope}}'\n")
    config = config_file(tmp_path, f"signals: {{profile: {tmp_path / 'bad.yaml'}}}\n")
    with pytest.raises(InvalidInput, match=r"bad.yaml:4:16  signals.x.aggregate"):
        build_catalog(config)


def test_unknown_profile_lists_the_bundled_ones():
    with pytest.raises(InvalidInput, match="use a bundled one .*article.*vllm"):
        build_catalog(profile="nope")


def test_matcher_lists_are_parsed_strictly():
    assert promql.parse_matchers(' job="vllm", model_name=~"llama.*" ') == 'job="vllm",model_name=~"llama.*",'
    assert promql.parse_matchers('a!="x\\"y",') == 'a!="x\\"y",'
    for bad in ['job=vllm', 'job="x"} or vector(1)', 'a="x" b="y"', 'a="x\ny"', '"x"']:
        with pytest.raises(ValueError):
            promql.parse_matchers(bad)


def test_tidy_only_touches_what_templates_leave_outside_strings():
    assert promql.tidy('x{} + y{a="b",} + sum by (a,) (z{a=~"{},}"})') == 'x + y{a="b"} + sum by (a) (z{a=~"{},}"})'


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (10, "10s"), (60, "1m"), (120, "2m"), (90, "1m30s"),
                                               (0.5, "500ms"), (3600, "1h"), (86400 + 1, "1d1s")])
def test_durations_in_prometheus_syntax(seconds, text):
    assert promql.prom_duration(seconds) == text
