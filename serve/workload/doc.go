// Package workload names the Kubernetes pod, namespace and container of GPU
// processes, for the node daemon's metrics and API.
//
// # Where the names come from
//
// Two sources each know half of the answer, and the GPU is what joins them:
//
//  1. The process's cgroup path (read by package gpu into gpu.Process's
//     Container) says whether the process runs in a Kubernetes pod (the pod
//     UID) and in which container (the 64-digit container ID). It does not
//     give names.
//  2. The kubelet's pod-resources API (gRPC on the local Unix socket
//     DefaultSocket, k8s.io/kubelet/pkg/apis/podresources/v1, List) gives,
//     for each running pod, its name and namespace and, for each of its
//     containers, the container's name and the devices the device plugins
//     allocated to it. The NVIDIA device plugin's device IDs are GPU UUIDs
//     ("GPU-..."), the same UUIDs NVML reports, so a process's
//     gpu.Process.DeviceUUID finds the containers that hold its GPU. The API
//     carries no pod UIDs and no container IDs, which is why the match goes
//     through the GPU.
//
// No API server is involved (no RBAC, no token): the socket is local, and
// reading it needs write permission on it, which in practice means uid 0.
// The API's Get call is not used: it takes a pod's name, which is what we
// are looking for.
//
// The one call is made with the standard library (client.go): gRPC's
// framing over net/http's unencrypted HTTP/2, and the four messages it
// reads decoded from the protobuf wire format with protowire. The generated
// client (google.golang.org/grpc with k8s.io/kubelet's types) would add
// 6.3 MB to a daemon-sized binary for one unary call, where this client adds
// 0.8 MB (docs/dependencies.md has the measurement). Those two modules are used by the tests only: the tests'
// kubelet is a grpc-go server with the generated types, the stack the
// kubelet itself runs, and a fuzz test checks the decoder against the
// generated one.
//
// # Refresh
//
// Run lists the pods at start and every Options.Refresh (30 s), each listing
// bounded by Options.Timeout (5 s). A listing becomes an immutable index
// (GPU → the distinct containers holding it) that is swapped in atomically,
// so Lookup reads it without a lock, never waits for the kubelet and
// allocates nothing. A failed listing is retried after 1 s, 2 s, 4 s, ... up
// to the refresh period, on a fresh connection each time (a restarted
// kubelet makes a new socket). Until a listing succeeds again the previous index is
// kept, for at most four refresh periods; then it is dropped, because a GPU
// may have passed to another pod since. A missing socket (no kubelet on this
// host, or the directory not mounted into the daemon's container) is not an
// error loop: it is logged once at info level, the index is emptied, and the
// socket is looked for again every refresh period. Status reports the last
// attempt and success, the error and the size of the index for the daemon's
// logs and health endpoint.
//
// # Matching rule
//
// For a process p on GPU U (p.DeviceUUID):
//
//   - p is in a pod (p.Container.PodUID set) and exactly one container in
//     the listing holds U: p gets that container's pod, namespace and name.
//   - p is in a pod and several containers hold U (time-slicing or MPS
//     replicas of one GPU, or MIG instances of one GPU given to different
//     pods, see below): which one p belongs to is not known, so nothing is
//     guessed. If they all belong to one pod, p gets that pod and namespace;
//     otherwise pod and namespace are empty. The container is the short
//     (12-digit) container ID from the cgroup.
//   - p is in a pod and no container in the listing holds U (the pod
//     requested no GPU, the listing failed or is older than the pod): pod
//     and namespace are empty, the container is the short container ID.
//   - p is in a container outside Kubernetes (docker, podman): pod and
//     namespace are empty, the container is the short container ID.
//   - p is in no container: all three are empty.
//
// Device IDs are read in the NVIDIA device plugin's forms: "GPU-<uuid>" (a
// whole GPU), "GPU-<uuid>::<n>" (replica n of a shared GPU; the replica
// suffix is dropped, and one container holding two replicas of U is one
// holder), "MIG-GPU-<uuid>/<gi>/<ci>" (a MIG instance in the old form,
// which names its GPU) and "MIG-<uuid>" (a MIG instance in the form of
// drivers from R470 on, which does not). NVML lists the processes of a MIG
// GPU under the physical GPU, and package gpu does not say which instance
// a process runs in, so all instances of U count as holders of U. (A
// process whose DeviceUUID is itself a MIG UUID would match that
// instance's holder exactly; package gpu does not report those yet.) The new
// MIG form and IDs under the device plugin's "index" strategy match only
// through Options.GPUOf, which maps them to their GPU's UUID; without it
// they are counted in Status().Unmapped and their processes get no pod
// name. IDs of other shapes (other vendors' devices) are ignored.
//
// # Limits
//
// The rule trusts that a pod process on GPU U belongs to a container that
// holds U. A container that reaches a GPU it was not allocated (a
// privileged container, NVIDIA_VISIBLE_DEVICES=all in a pod that requests
// no GPU, as this daemon's own DaemonSet does, or a host device mount)
// would be attributed to the one container that does hold U. Matching the
// pod UID would rule that out, but the API does not carry it.
//
// Pods whose GPUs come from dynamic resource allocation (the listing's
// dynamic_resources: CDI device names, not GPU UUIDs) are not read; their
// processes get container IDs only.
//
// Names lag the kubelet by up to one refresh period: a pod started since the
// last listing gets no name yet, and a process of a pod that has ended but
// still holds memory may be attributed to the pod that got its GPU next.
package workload
