package deploy

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/serve"
	"github.com/vramhq/vram/serve/api"
)

// posture is what the checks expect of one rendering of the daemon's
// objects; the plain manifests and each Helm variant declare theirs.
type posture struct {
	namespace    string
	policies     bool // CAP_KILL expected, config policies.enabled true
	podResources bool // kubelet socket mounted; uid 0 allowed
	tokenSecret  string
	readonly     bool   // config readonly
	storage      string // "hostPath" or "emptyDir"
	monitor      bool   // a ServiceMonitor is expected
}

// requiredKinds are the objects every rendering carries, besides the
// ServiceMonitor when it is enabled.
var requiredKinds = []string{"ServiceAccount", "ConfigMap", "DaemonSet", "Service"}

// rbacKinds must not appear: the daemon reads the kubelet's local socket and
// /proc, never the API server.
var rbacKinds = []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}

// checkObjects runs every check on one rendering and returns the problems.
func checkObjects(docs []obj, want posture) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	kinds := byKind(docs)
	for _, d := range docs {
		for _, k := range []string{"apiVersion", "kind"} {
			if strAt(d, k) == "" {
				bad("%s: no %s", kindName(d), k)
			}
		}
		if strAt(d, "metadata", "name") == "" {
			bad("%s: no metadata.name", kindName(d))
		}
		if k := strAt(d, "kind"); k != "Namespace" && strAt(d, "metadata", "namespace") != want.namespace {
			bad("%s: namespace %q, want %q", kindName(d), strAt(d, "metadata", "namespace"), want.namespace)
		}
		if slices.Contains(rbacKinds, strAt(d, "kind")) {
			bad("%s: RBAC object, but the daemon needs no API access", kindName(d))
		}
	}
	for _, k := range requiredKinds {
		if len(kinds[k]) != 1 {
			bad("%d %s objects, want 1", len(kinds[k]), k)
		}
	}
	if n := len(kinds["ServiceMonitor"]); (n == 1) != want.monitor || n > 1 {
		bad("%d ServiceMonitor objects, want it %v", n, want.monitor)
	}
	if len(p) > 0 {
		return p
	}
	ds, svc, sa, cm := kinds["DaemonSet"][0], kinds["Service"][0], kinds["ServiceAccount"][0], kinds["ConfigMap"][0]
	if v, _ := lookupT[bool](sa, "automountServiceAccountToken"); v {
		bad("ServiceAccount mounts an API token the daemon does not need")
	}
	p = append(p, checkDaemonSet(ds, strAt(sa, "metadata", "name"), strAt(cm, "metadata", "name"), want)...)
	p = append(p, checkConfig(cm, addrArg(ds), want)...)
	p = append(p, checkService(svc, ds)...)
	if want.monitor {
		p = append(p, checkServiceMonitor(kinds["ServiceMonitor"][0], svc, want)...)
	}
	return p
}

func checkDaemonSet(ds obj, serviceAccount, configMap string, want posture) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, "DaemonSet: "+fmt.Sprintf(format, args...)) }
	if strAt(ds, "apiVersion") != "apps/v1" {
		bad("apiVersion %q, want apps/v1", strAt(ds, "apiVersion"))
	}
	pod := mapAt(ds, "spec", "template")
	spec := mapAt(pod, "spec")
	if spec == nil {
		return append(p, "DaemonSet: no spec.template.spec")
	}

	// The selector must select the pod template's own labels.
	sel, labels := mapAt(ds, "spec", "selector", "matchLabels"), mapAt(pod, "metadata", "labels")
	if len(sel) == 0 {
		bad("empty selector")
	}
	for k, v := range sel {
		if labels[k] != v {
			bad("selector %s=%v not on the pod template (%v)", k, v, labels[k])
		}
	}

	if strAt(spec, "serviceAccountName") != serviceAccount {
		bad("serviceAccountName %q, want %q", strAt(spec, "serviceAccountName"), serviceAccount)
	}
	if v, ok := lookupT[bool](spec, "automountServiceAccountToken"); !ok || v {
		bad("automountServiceAccountToken must be false")
	}
	if v, _ := lookupT[bool](spec, "hostPID"); !v {
		bad("hostPID must be true: NVML reports host PIDs")
	}
	for _, k := range []string{"hostNetwork", "hostIPC"} {
		if v, _ := lookupT[bool](spec, k); v {
			bad("%s is not needed", k)
		}
	}
	if sel := mapAt(spec, "nodeSelector"); len(sel) == 0 {
		bad("no nodeSelector: the daemon belongs on GPU nodes only")
	}
	tolerated := false
	for _, tol := range listAt(spec, "tolerations") {
		if strAt(tol, "key") == "nvidia.com/gpu" && (strAt(tol, "operator") == "Exists" || strAt(tol, "effect") == "") {
			tolerated = true
		}
	}
	if !tolerated {
		bad("no toleration for the nvidia.com/gpu taint")
	}

	containers := listAt(spec, "containers")
	if len(containers) != 1 {
		return append(p, fmt.Sprintf("DaemonSet: %d containers, want 1", len(containers)))
	}
	c := containers[0].(obj)
	env := map[string]string{}
	for _, e := range listAt(c, "env") {
		env[strAt(e, "name")] = strAt(e, "value")
	}
	if strAt(spec, "runtimeClassName") != "nvidia" && env["NVIDIA_VISIBLE_DEVICES"] != "all" {
		bad("neither runtimeClassName nvidia nor NVIDIA_VISIBLE_DEVICES=all")
	}
	if caps := env["NVIDIA_DRIVER_CAPABILITIES"]; caps != "utility" {
		bad("NVIDIA_DRIVER_CAPABILITIES=%q, want utility (NVML only)", caps)
	}

	// Security context of the pod and the container.
	psc, csc := mapAt(spec, "securityContext"), mapAt(c, "securityContext")
	if v, ok := lookupT[bool](csc, "readOnlyRootFilesystem"); !ok || !v {
		bad("readOnlyRootFilesystem must be true")
	}
	if v, ok := lookupT[bool](csc, "allowPrivilegeEscalation"); !ok || v {
		bad("allowPrivilegeEscalation must be false")
	}
	if v, _ := lookupT[bool](csc, "privileged"); v {
		bad("privileged container")
	}
	if strAt(psc, "seccompProfile", "type") != "RuntimeDefault" {
		bad("seccompProfile %q, want RuntimeDefault", strAt(psc, "seccompProfile", "type"))
	}
	if drop := listAt(csc, "capabilities", "drop"); !slices.Contains(drop, any("ALL")) {
		bad("capabilities.drop %v must contain ALL", drop)
	}
	var added []string
	for _, a := range listAt(csc, "capabilities", "add") {
		added = append(added, fmt.Sprint(a))
	}
	wantAdd := []string(nil)
	if want.policies {
		wantAdd = []string{"KILL"}
	}
	if !slices.Equal(added, wantAdd) {
		bad("capabilities.add %v, want %v (KILL only when policies are on)", added, wantAdd)
	}
	uid, hasUID := lookupT[int](psc, "runAsUser")
	nonRoot, _ := lookupT[bool](psc, "runAsNonRoot")
	switch {
	case !hasUID:
		bad("runAsUser not set")
	case uid == 0 && !want.podResources:
		bad("runs as root without the pod-resources socket that justifies it")
	case uid == 0 && nonRoot:
		bad("runAsUser 0 with runAsNonRoot true never starts")
	case uid != 0 && !nonRoot:
		bad("non-root uid %d without runAsNonRoot", uid)
	}

	// Volumes and mounts.
	volumes := map[string]obj{}
	for _, v := range listAt(spec, "volumes") {
		volumes[strAt(v, "name")] = v.(obj)
	}
	mounts := map[string]obj{} // by mount path
	for _, m := range listAt(c, "volumeMounts") {
		mounts[strAt(m, "mountPath")] = m.(obj)
		if volumes[strAt(m, "name")] == nil {
			bad("volumeMount %s names no volume", strAt(m, "name"))
		}
	}
	mountOf := func(dir string) (obj, obj) {
		m := mounts[dir]
		return m, volumes[strAt(m, "name")]
	}
	writable := []string{}
	for dir, m := range mounts {
		if ro, _ := lookupT[bool](m, "readOnly"); !ro {
			writable = append(writable, dir)
		}
	}
	slices.Sort(writable)
	if !slices.Equal(writable, []string{"/tmp", "/var/lib/vram"}) {
		bad("writable mounts %v, want only /tmp and /var/lib/vram", writable)
	}
	m, v := mountOf("/var/lib/kubelet/pod-resources")
	switch {
	case want.podResources && m == nil:
		bad("kubelet pod-resources directory not mounted")
	case want.podResources:
		if ro, _ := lookupT[bool](m, "readOnly"); !ro {
			bad("pod-resources mount must be read-only")
		}
		if strAt(v, "hostPath", "path") == "" {
			bad("pod-resources volume is not a hostPath")
		}
	case m != nil:
		bad("pod-resources mounted although disabled")
	}
	if _, v := mountOf("/var/lib/vram"); v == nil || mapAt(v, want.storage) == nil {
		bad("state volume at /var/lib/vram is not a %s", want.storage)
	}
	if _, v := mountOf("/etc/vram"); strAt(v, "configMap", "name") != configMap {
		bad("/etc/vram is not the ConfigMap %s", configMap)
	}
	m, v = mountOf("/etc/vram-token")
	switch {
	case want.tokenSecret != "" && strAt(v, "secret", "secretName") != want.tokenSecret:
		bad("token Secret %s not mounted at /etc/vram-token", want.tokenSecret)
	case want.tokenSecret == "" && m != nil:
		bad("token mounted although no Secret is named")
	}

	// Arguments, port and probes.
	args := map[string]string{}
	for i, a := range listAt(c, "args") {
		s := fmt.Sprint(a)
		if i == 0 {
			if s != "serve" {
				bad("first argument %q, want serve", s)
			}
			continue
		}
		k, val, ok := strings.Cut(s, "=")
		if !ok {
			bad("argument %q is not --flag=value", s)
		}
		args[k] = val
	}
	if db := args["--db"]; path.Dir(db) != "/var/lib/vram" {
		bad("--db=%q is not in the state volume", db)
	}
	if cfg := args["--config"]; path.Dir(cfg) != "/etc/vram" {
		bad("--config=%q is not in the ConfigMap mount", cfg)
	}
	var metricsPort int
	for _, port := range listAt(c, "ports") {
		if strAt(port, "name") == "metrics" {
			metricsPort, _ = lookupT[int](port, "containerPort")
		}
	}
	if metricsPort == 0 {
		bad("no container port named metrics")
	}
	_, portStr, _ := strings.Cut(args["--addr"], ":")
	if portStr != strconv.Itoa(metricsPort) {
		bad("--addr=%q does not listen on the metrics port %d", args["--addr"], metricsPort)
	}
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		get := mapAt(c, probe, "httpGet")
		if strAt(get, "path") != "/healthz" {
			bad("%s path %q, want /healthz", probe, strAt(get, "path"))
		}
		if port, _ := lookup(get, "port"); port != "metrics" && port != metricsPort {
			bad("%s port %v is not the metrics port", probe, port)
		}
	}

	// Requests and limits, limits at least the requests.
	for _, res := range []string{"cpu", "memory"} {
		req, errR := quantity(mapAt(c, "resources", "requests")[res])
		lim, errL := quantity(mapAt(c, "resources", "limits")[res])
		switch {
		case errR != nil || errL != nil:
			bad("%s request/limit: %v %v", res, errR, errL)
		case req == 0 || lim < req:
			bad("%s request %v, limit %v", res, req, lim)
		}
	}
	return p
}

// checkConfig checks the daemon's configuration file in the ConfigMap,
// read with the daemon's own reader, against the posture and the --addr the
// DaemonSet passes.
func checkConfig(cm obj, addr string, want posture) []string {
	text := strAt(cm, "data", "config.yaml")
	cfg, err := serve.ParseConfig("config.yaml", []byte(text))
	if err != nil {
		return []string{fmt.Sprintf("ConfigMap config.yaml: %v", err)}
	}
	var p []string
	if cfg.HTTP.ReadOnly != want.readonly {
		p = append(p, fmt.Sprintf("config http.read_only=%v, want %v", cfg.HTTP.ReadOnly, want.readonly))
	}
	tokenFile := cfg.HTTP.TokenFile
	if (tokenFile != "") != (want.tokenSecret != "") || tokenFile != "" && path.Dir(tokenFile) != "/etc/vram-token" {
		p = append(p, fmt.Sprintf("config http.token_file=%q with token Secret %q", tokenFile, want.tokenSecret))
	}
	if cfg.HTTP.Mutations != (want.tokenSecret != "") {
		p = append(p, fmt.Sprintf("config http.mutations=%v with token Secret %q", cfg.HTTP.Mutations, want.tokenSecret))
	}
	// The pod IP is not loopback: the daemon refuses it without allow_remote.
	host := strings.ReplaceAll(addr, "$(POD_IP)", "10.1.2.3")
	if err := api.CheckListen(host, cfg.HTTP.AllowRemote); err != nil {
		p = append(p, fmt.Sprintf("--addr=%s with config http.allow_remote=%v: the daemon would refuse to start: %v", addr, cfg.HTTP.AllowRemote, err))
	}
	// Policies are evaluated only when policy_file is set, which goes with
	// CAP_KILL; the file must be in the ConfigMap and parse with the
	// daemon's own reader, and nothing is signalled until an operator says
	// so.
	file := cfg.PolicyFile
	if (file != "") != want.policies {
		p = append(p, fmt.Sprintf("config policy_file=%q with policies %v", file, want.policies))
	}
	if file == "" {
		file = "/etc/vram/policy.yaml"
	}
	if path.Dir(file) != "/etc/vram" {
		p = append(p, fmt.Sprintf("config policy_file=%q is not in the ConfigMap mount", file))
	} else if body, ok := lookupT[string](cm, "data", path.Base(file)); !ok {
		p = append(p, fmt.Sprintf("ConfigMap has no %s", path.Base(file)))
	} else if pol, err := policy.Parse(path.Base(file), []byte(body)); err != nil {
		p = append(p, fmt.Sprintf("ConfigMap %s: %v", path.Base(file), err))
	} else if !pol.DryRun && !want.policies {
		p = append(p, "policy file is not dry_run while policies are off")
	}
	sock := cfg.PodResourcesSocket
	if cfg.PodResourcesAuto || (sock != "") != want.podResources || sock != "" && !strings.HasPrefix(sock, "/var/lib/kubelet/pod-resources/") {
		p = append(p, fmt.Sprintf("config kubernetes.pod_resources_socket=%q (set: %v), pod-resources %v", sock, !cfg.PodResourcesAuto, want.podResources))
	}
	return p
}

// addrArg is the --addr the DaemonSet's container passes.
func addrArg(ds obj) string {
	for _, a := range listAt(mapAt(ds, "spec", "template", "spec", "containers", "0"), "args") {
		if v, ok := strings.CutPrefix(fmt.Sprint(a), "--addr="); ok {
			return v
		}
	}
	return ""
}

func checkService(svc, ds obj) []string {
	var p []string
	labels := mapAt(ds, "spec", "template", "metadata", "labels")
	sel := mapAt(svc, "spec", "selector")
	if len(sel) == 0 {
		p = append(p, "Service: empty selector")
	}
	for k, v := range sel {
		if labels[k] != v {
			p = append(p, fmt.Sprintf("Service: selector %s=%v does not select the daemon's pods", k, v))
		}
	}
	ports := listAt(svc, "spec", "ports")
	if len(ports) != 1 || strAt(ports[0], "name") != "metrics" || strAt(ports[0], "targetPort") != "metrics" {
		p = append(p, fmt.Sprintf("Service: ports %v, want one named metrics targeting the metrics port", ports))
	}
	return p
}

func checkServiceMonitor(sm, svc obj, want posture) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, "ServiceMonitor: "+fmt.Sprintf(format, args...)) }
	if strAt(sm, "apiVersion") != "monitoring.coreos.com/v1" {
		bad("apiVersion %q", strAt(sm, "apiVersion"))
	}
	labels := mapAt(svc, "metadata", "labels")
	sel := mapAt(sm, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		bad("empty selector")
	}
	for k, v := range sel {
		if labels[k] != v {
			bad("selector %s=%v does not select the Service", k, v)
		}
	}
	if ns := listAt(sm, "spec", "namespaceSelector", "matchNames"); !slices.Contains(ns, any(want.namespace)) {
		bad("namespaceSelector %v misses %s", ns, want.namespace)
	}
	eps := listAt(sm, "spec", "endpoints")
	if len(eps) != 1 || strAt(eps[0], "port") != "metrics" || strAt(eps[0], "path") != "/metrics" {
		bad("endpoints %v, want one on port metrics, path /metrics", eps)
		return p
	}
	dropped := false
	for _, r := range listAt(eps[0], "relabelings") {
		if strings.EqualFold(strAt(r, "action"), "labeldrop") {
			re, err := regexp.Compile("^(?:" + strAt(r, "regex") + ")$")
			dropped = err == nil && re.MatchString("pod") && re.MatchString("namespace")
		}
	}
	if !dropped {
		bad("the target's pod and namespace labels are not dropped: host processes would be attributed to the daemon's pod")
	}
	return p
}

// lookupOr is lookup for messages: the value or "<missing>".
func lookupOr(v any, keys ...string) any {
	if x, ok := lookup(v, keys...); ok {
		return x
	}
	return "<missing>"
}

// plainPosture is what deploy/kubernetes/daemonset.yaml promises.
var plainPosture = posture{namespace: "vram-system", podResources: true, readonly: true, storage: "hostPath", monitor: true}

func TestPlainManifests(t *testing.T) {
	docs := readYAMLFile(t, "kubernetes/daemonset.yaml")
	for _, problem := range checkObjects(docs, plainPosture) {
		t.Error(problem)
	}
	ns := byKind(docs)["Namespace"]
	if len(ns) != 1 || strAt(ns[0], "metadata", "name") != "vram-system" {
		t.Fatalf("want one Namespace vram-system, got %v", ns)
	}
	if lvl := strAt(ns[0], "metadata", "labels", "pod-security.kubernetes.io/enforce"); lvl != "privileged" {
		t.Errorf("namespace Pod Security level %q: hostPID and hostPath need privileged", lvl)
	}
}

// TestChecksCatchDamage damages one field of the good manifests at a time
// and expects the checks to name the problem: the checks can fail.
func TestChecksCatchDamage(t *testing.T) {
	good := readYAMLFile(t, "kubernetes/daemonset.yaml")
	set := func(keys []string, v any) func([]obj) {
		return func(docs []obj) {
			for _, d := range docs {
				if strAt(d, "kind") != keys[0] {
					continue
				}
				parent, _ := lookup(d, keys[1:len(keys)-1]...)
				switch c := parent.(type) {
				case obj:
					if v == nil {
						delete(c, keys[len(keys)-1])
					} else {
						c[keys[len(keys)-1]] = v
					}
				case []any:
					i, _ := strconv.Atoi(keys[len(keys)-1])
					c[i] = v
				}
			}
		}
	}
	ctr := []string{"DaemonSet", "spec", "template", "spec", "containers", "0"}
	at := func(keys ...string) []string { return append(slices.Clone(ctr), keys...) }
	podSpec := func(keys ...string) []string {
		return append([]string{"DaemonSet", "spec", "template", "spec"}, keys...)
	}
	for _, tc := range []struct {
		name   string
		damage func([]obj)
		want   string
	}{
		{"writable root", set(at("securityContext", "readOnlyRootFilesystem"), false), "readOnlyRootFilesystem"},
		{"escalation", set(at("securityContext", "allowPrivilegeEscalation"), true), "allowPrivilegeEscalation"},
		{"capabilities kept", set(at("securityContext", "capabilities", "drop"), []any{"NET_RAW"}), "drop"},
		{"kill without policies", set(at("securityContext", "capabilities", "add"), []any{"KILL"}), "capabilities.add"},
		{"no hostPID", set(podSpec("hostPID"), false), "hostPID"},
		{"compute capability", set(at("env", "3", "value"), "compute,utility"), "NVIDIA_DRIVER_CAPABILITIES"},
		{"writable pod-resources", set(at("volumeMounts", "3", "readOnly"), false), "writable mounts"},
		{"no tolerations", set(podSpec("tolerations"), nil), "toleration"},
		{"no node selector", set(podSpec("nodeSelector"), nil), "nodeSelector"},
		{"probe path", set(at("livenessProbe", "httpGet", "path"), "/health"), "livenessProbe path"},
		{"limit below request", set(at("resources", "limits", "memory"), "32Mi"), "memory request"},
		{"no limits", set(at("resources", "limits"), nil), "request/limit"},
		{"addr port", set(at("args", "1"), "--addr=$(POD_IP):9500"), "--addr"},
		{"root and non-root", set(podSpec("securityContext", "runAsNonRoot"), true), "never starts"},
		{"service selects nothing", set([]string{"Service", "spec", "selector", "app.kubernetes.io/name"}, "other"), "Service: selector"},
		{"monitor misses service", set([]string{"ServiceMonitor", "spec", "selector", "matchLabels", "app.kubernetes.io/component"}, "x"), "ServiceMonitor: selector"},
		{"target pod label kept", set([]string{"ServiceMonitor", "spec", "endpoints", "0", "relabelings"}, []any{}), "pod and namespace labels"},
		{"token mounted", set([]string{"ServiceAccount", "automountServiceAccountToken"}, true), "API token"},
		{"policies on in config", set([]string{"ConfigMap", "data", "config.yaml"}, "version: 1\npolicy_file: /etc/vram/policy.yaml\nhttp: {read_only: true, allow_remote: true}\nkubernetes: {pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock}\n"), "config policy_file"},
		{"read-write config", set([]string{"ConfigMap", "data", "config.yaml"}, "version: 1\nhttp: {read_only: false, allow_remote: true}\nkubernetes: {pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock}\n"), "config http.read_only"},
		{"remote address refused", set([]string{"ConfigMap", "data", "config.yaml"}, "version: 1\nhttp: {read_only: true}\nkubernetes: {pod_resources_socket: /var/lib/kubelet/pod-resources/kubelet.sock}\n"), "would refuse to start"},
		{"socket left to chance", set([]string{"ConfigMap", "data", "config.yaml"}, "version: 1\nhttp: {read_only: true, allow_remote: true}\n"), "pod_resources_socket"},
		{"config the daemon refuses", set([]string{"ConfigMap", "data", "config.yaml"}, "version: 1\nsample_interval: 1s\n"), "sample_interval: unknown field"},
		{"broken policy file", set([]string{"ConfigMap", "data", "policy.yaml"}, "version: 1\nreclaim:\n  - name: x\n    when: [sleepy]\n"), "policy.yaml"},
		{"rbac", func(docs []obj) {}, "RBAC"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var docs []obj
			for _, d := range good {
				docs = append(docs, deepCopy(d).(obj))
			}
			if tc.name == "rbac" {
				docs = append(docs, obj{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
					"metadata": obj{"name": "vram", "namespace": "vram-system"}})
			}
			tc.damage(docs)
			problems := checkObjects(docs, plainPosture)
			if !slices.ContainsFunc(problems, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("damage not caught: problems %q, want one mentioning %q", problems, tc.want)
			}
		})
	}
}
