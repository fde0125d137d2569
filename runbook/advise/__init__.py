"""`runbook advise`: the SOP's launch flags (section 5) as a linter over a vLLM workload's command line.
Pure logic here (manifests, shapes, capacity, checks); the command and the cluster read live elsewhere."""
