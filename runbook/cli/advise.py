"""`runbook advise`: lint a vLLM workload's launch flags against the SOP, from a manifest file or the cluster.
Exit 0 when every flag agrees with the SOP, 10 when there are findings, 3 for input it cannot read."""

from __future__ import annotations

import click

from runbook.cli.output import output_option


@click.command("advise")
@click.argument("workload", required=False)
@click.option("-f", "--filename", "manifest", type=click.Path(dir_okay=False), default=None,
              help="A manifest file (multi-document YAML): its Deployments, StatefulSets, DaemonSets and Pods.")
@click.option("--namespace", "-n", default=None,
              help="Namespace of WORKLOAD [default: the kubeconfig context's namespace, else default].")
@click.option("--gpu", "gpu_name", default=None, shell_complete=lambda ctx, param, incomplete: _gpu_names(incomplete),
              help="The GPU (A100-80, H100-80, H200-141, L4-24, A10G-24, …).")
@click.option("--gpu-memory-gib", type=float, default=None, help="One GPU's memory in GiB, for a GPU not in the table.")
@click.option("--model", "model_name", default=None, help="The model to size for (default: the command line's --model, or vllm serve MODEL).")
@click.option("--model-config", type=click.Path(dir_okay=False), default=None,
              help="The model's config.json (layers, KV heads, head dim, max_position_embeddings).")
@click.option("--avg-concurrency", type=click.IntRange(min=1), default=None,
              help="Average concurrent requests: --max-num-seqs should be min(128, 2 x this).")
@click.option("--p95-prompt-tokens", type=click.IntRange(min=1), default=None,
              help="P95 prompt length: sizes --max-num-batched-tokens and decides chunked prefill.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="Config file (its kubernetes: section), for WORKLOAD.")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None, type=click.Path(dir_okay=False),
              help="kubeconfig file [env KUBECONFIG].")
@click.option("--context", "kube_context", envvar="RUNBOOK_KUBE_CONTEXT", default=None,
              help="kubeconfig context to use; never guessed when several exist.")
@click.option("--in-cluster", is_flag=True, default=False, help="Use the pod's service account.")
@output_option
def advise(workload: str | None, manifest: str | None, namespace: str | None, gpu_name: str | None,
           gpu_memory_gib: float | None, model_name: str | None, model_config: str | None,
           avg_concurrency: int | None, p95_prompt_tokens: int | None, config_path: str | None,
           kubeconfig: str | None, kube_context: str | None, in_cluster: bool, output: str) -> None:
    """Check a vLLM workload's launch flags against the SOP (section 5), each finding with why and a value.

    \b
    runbook advise -f deploy.yaml                    a manifest file
    runbook advise statefulset/vllm-server -n llm    the live workload

    Exit codes: 0 nothing to change, 10 findings, 3 input that cannot be read (the message says which and how).
    """
    from runbook.advise.checks import Options, advise_workload
    from runbook.advise.tables import gpu_by_memory, gpu_by_name
    from runbook.errors import ExitCode, InvalidInput

    if (workload is None) == (manifest is None):
        raise click.UsageError("give a manifest with -f FILE or a live workload KIND/NAME (e.g. statefulset/vllm-server), "
                               "one of the two")
    if gpu_name and gpu_memory_gib is not None:
        raise click.UsageError("give --gpu or --gpu-memory-gib, not both")
    gpu = gpu_by_name(gpu_name) if gpu_name else gpu_by_memory(gpu_memory_gib) if gpu_memory_gib is not None else None
    options = Options(gpu=gpu, model=model_name, model_config=model_config, avg_concurrency=avg_concurrency,
                      p95_prompt_tokens=p95_prompt_tokens)
    if manifest is not None:
        specs = _from_file(manifest)
    else:
        specs, namespace = _from_cluster(workload, namespace, config_path, kubeconfig, kube_context, in_cluster)
    advice = [a for spec in specs for a in advise_workload(spec, options)]
    if not advice:
        looked = ", ".join(f"{s.ref} (containers: {', '.join(str(c.get('name')) for c in s.pod_spec.get('containers') or []) or 'none'})"
                           for s in specs) or "no Deployment, StatefulSet, DaemonSet or Pod"
        source = manifest or f"{workload} in {namespace}"
        raise InvalidInput(f"{source}: no vLLM container (looked at {looked}); a vLLM container runs `vllm serve MODEL` "
                           "or `python -m vllm.entrypoints.openai.api_server` in its command or args")
    findings = sum(len(a.findings) for a in advice)
    if output == "json":
        from runbook.cli.output import print_json

        print_json({"findings": findings, "workloads": [a.to_json() for a in advice]})
    else:
        _print_text(advice)
    if findings:
        raise SystemExit(int(ExitCode.FINDINGS))


def _gpu_names(incomplete: str) -> list:
    from click.shell_completion import CompletionItem

    from runbook.advise.tables import gpu_names

    return [CompletionItem(name) for name in gpu_names() if name.lower().startswith(incomplete.lower())]


def _from_file(path: str) -> list:
    from runbook.advise.manifest import read_manifest

    return read_manifest(path)


def _from_cluster(ref: str, namespace: str | None, config_path: str | None, kubeconfig: str | None,
                  kube_context: str | None, in_cluster: bool) -> tuple[list, str]:
    """(the workload's specs, the namespace read: -n, else the context's as kubectl has it)."""
    from runbook.advise.manifest import workloads_in
    from runbook.backends.kubernetes.connect import connect
    from runbook.backends.kubernetes.workload_object import parse_ref, read_workload_object
    from runbook.config import load_config
    from runbook.errors import NotConfigured

    parse_ref(ref)  # a bad KIND/NAME is said before any connection is made
    cluster = connect(load_config(config_path), kubeconfig=kubeconfig, context=kube_context, in_cluster=in_cluster)
    if cluster is None:
        raise NotConfigured("no cluster to read the workload from: pass --kubeconfig (or set KUBECONFIG) and "
                            "--context, or --in-cluster, or give a manifest with -f")
    namespace = namespace or cluster.default_namespace
    try:
        obj = read_workload_object(cluster, namespace, ref)
    finally:
        cluster.close()
    return workloads_in(obj, f"{ref} in {namespace} (live)"), namespace


def _print_text(advice: list) -> None:
    from rich.text import Text

    from runbook.cli.output import progress_console

    # One line per finding however narrow the terminal: logs and pipes keep them whole.
    console = progress_console()
    for item in advice:
        head = Text()
        head.append(item.workload, style="bold")
        head.append(f" container {item.container} ({item.where}): model {item.model} ({item.model_source}), "
                    f"GPU {item.gpu} ({item.gpu_source})")
        console.print(head)
        if not item.findings:
            console.print("  every flag checked agrees with the SOP", markup=False)
        for finding in item.findings:
            current = finding.current if finding.current is not None else (
                "on" if finding.where != "not set" else "not set")
            suggested = finding.suggested if finding.suggested is not None else "remove it"
            place = f"{finding.location} {finding.where}" if finding.location else finding.where
            console.print(f"  {finding.severity}: {finding.flag} {current} -> {suggested}  [{finding.check}] "
                          f"({place})", markup=False)
            console.print(f"    why: {finding.reason}", markup=False)
            for step in finding.arithmetic:
                console.print(f"    = {step}", markup=False)
        for note in item.unchecked:
            console.print(f"  not checked: {note}", markup=False)
    total = sum(len(a.findings) for a in advice)
    console.print(f"{total} finding{'s' if total != 1 else ''}" if total else "No findings.", markup=False)
