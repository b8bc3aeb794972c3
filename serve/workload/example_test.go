package workload_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/workload"
)

// kubelet answers List with one pod holding one GPU, as a kubelet would
// for a pod that requested nvidia.com/gpu: 1.
type kubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
}

func (kubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
		Name: "train-0", Namespace: "ml",
		Containers: []*podresourcesv1.ContainerResources{{
			Name: "trainer",
			Devices: []*podresourcesv1.ContainerDevices{{
				ResourceName: "nvidia.com/gpu",
				DeviceIds:    []string{"GPU-63feeb45-94c6-b9cb-78ea-98e9b7a5be6b"},
			}},
		}},
	}}}, nil
}

func Example() {
	// A stand-in for the kubelet's socket (DefaultSocket on a node).
	dir, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, kubelet{})
	go srv.Serve(l)
	defer srv.Stop()

	r := workload.New(workload.Options{Socket: socket})
	// The daemon runs r.Run(ctx) in a goroutine; one Refresh does the same
	// listing once.
	if err := r.Refresh(context.Background()); err != nil {
		fmt.Println(err)
		return
	}

	// Two processes on the GPU, as package gpu reads them: one in a pod
	// (its cgroup names the pod UID and container ID), one in a plain
	// docker container.
	cid := "4f2a9c1b7e3d5a6f8b0c2d4e6f8a0b1c3d5e7f9a1b3c5d7e9f0a2b4c6d8e0f1a"
	inPod := gpu.Process{PID: 4242, DeviceUUID: "GPU-63feeb45-94c6-b9cb-78ea-98e9b7a5be6b",
		Container: gpu.Container{Runtime: "containerd", ID: cid, PodUID: "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"}}
	inDocker := gpu.Process{PID: 5151, DeviceUUID: "GPU-63feeb45-94c6-b9cb-78ea-98e9b7a5be6b",
		Container: gpu.Container{Runtime: "docker", ID: cid}}

	fmt.Printf("%+v\n", r.Lookup(inPod))
	fmt.Printf("%+v\n", r.Lookup(inDocker))
	st := r.Status()
	fmt.Println("pods:", st.Pods, "error:", st.Err)
	// Output:
	// {Pod:train-0 Namespace:ml Container:trainer}
	// {Pod: Namespace: Container:4f2a9c1b7e3d}
	// pods: 1 error: <nil>
}
