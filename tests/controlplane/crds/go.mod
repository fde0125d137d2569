// The CRDs the control plane installs (tests/controlplane/build.sh): Gateway API, KEDA and kwok's exec and logs, from their modules.
module runbook.test/controlplane/crds

go 1.26.0

require (
	github.com/kedacore/keda/v2 v2.20.2
	sigs.k8s.io/gateway-api v1.4.1
	sigs.k8s.io/kwok v0.8.0
)
