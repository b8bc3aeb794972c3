// Package deploy holds no code: it is the home of vram's deployment files and
// of the tests that check them without a cluster, a helm binary or a network.
//
// The files, for the node daemon `vram serve` (docs/serve.md, docs/deploy.md):
//
//	kubernetes/daemonset.yaml  Namespace, ServiceAccount, ConfigMap, DaemonSet,
//	                           Service and ServiceMonitor, ready for kubectl apply
//	kubernetes/prometheusrule.yaml  optional alerts: leaks that will fill a
//	                           GPU, long leaks, orphaned and unattributed memory
//	helm/vram/                 the same objects as a Helm chart with values
//	grafana/vram-dashboard.json  per-GPU memory, top processes, leak slopes,
//	                           orphaned memory and policy actions
//	systemd/vram.service       a hardened unit for single hosts
//	systemd/config.yaml        the daemon's configuration (the same schema as
//	                           the ConfigMap's config.yaml)
//
// # What the tests check
//
// Every YAML document is decoded into generic maps (go.yaml.in/yaml/v3) and
// checked field by field, so a typo in a key is a failed lookup, not a silent
// default. The DaemonSet is held to the security posture that docs/deploy.md
// argues for: host PID namespace (NVML reports host PIDs), the NVIDIA runtime
// with only the "utility" driver capability, a read-only root filesystem, no
// privilege escalation, every capability dropped and CAP_KILL added only when
// policies are on, uid 0 only when the root-owned kubelet pod-resources socket
// is mounted (read-only), requests and limits, /healthz probes on the metrics
// port, the GPU node selector and the nvidia.com/gpu toleration. The Service
// must select the pods and the ServiceMonitor the Service, dropping the target's own
// pod and namespace labels; no RBAC object may
// appear, as the daemon never talks to the API server.
//
// The Helm chart is rendered by a small renderer in the tests: Go's
// text/template with the few Sprig and Helm functions the templates use
// (include, toYaml, nindent, quote, default, trunc, trimSuffix, contains,
// sha256sum, required, int64, fail) written out, and missing values treated
// as errors, which is stricter than helm. The rendered objects go through the
// same checks as the plain manifests, for the default values and for
// variants (policies on, non-root, token secret, no ServiceMonitor, alerts
// on). The chart has not been rendered by a real helm binary: none is
// packaged for this machine, and Sprig functions not listed above would only
// fail there.
//
// The Grafana dashboard is parsed as JSON; every PromQL expression, variable
// query and legend is scanned, and only the vram metric names and labels of the
// daemon's contract may appear. The alert rules get the same scan, and their
// annotations may only name exported labels and Prometheus's own template
// functions. The systemd unit is parsed into sections and
// keys and checked for its hardening settings; where systemd-analyze exists,
// it also verifies the unit and scores its exposure offline.
package deploy
