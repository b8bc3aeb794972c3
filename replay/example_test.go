package replay_test

import (
	"fmt"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/replay"
	"github.com/vramhq/vram/trace/rmm"
)

// Replay a few records on a simulated 1 GiB device: a 6 MiB request is cut
// from a 20 MiB segment, and the 2 MiB allocation left at the end is a leak.
func ExampleReplay() {
	recs := []rmm.Record{
		{Action: rmm.Allocate, Pointer: 0x1000, Size: 6 << 20},
		{Action: rmm.Allocate, Pointer: 0x2000, Size: 2 << 20},
		{Action: rmm.Free, Pointer: 0x1000, Size: 6 << 20},
		{Action: rmm.Free, Pointer: 0x9000, Size: 512}, // never allocated
	}
	dev := sim.MustNew(sim.Config{Capacity: 1 << 30})
	res, err := replay.Replay(replay.Records(recs), dev, alloc.Config{}, replay.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ops:", res.Ops, "unknown frees:", res.UnknownFrees)
	fmt.Println("peak live:", units.FormatBytes(res.PeakLiveBytes), "reserved:", units.FormatBytes(res.PeakReservedBytes))
	fmt.Println("leaked:", units.FormatBytes(res.LeakedBytes), "driver calls:", res.DeviceCalls.Total())
	// Output:
	// ops: 3 unknown frees: 1
	// peak live: 8.00 MiB reserved: 20.00 MiB
	// leaked: 2.00 MiB driver calls: 1
}

// Measure a generated trace under every policy, with the smallest capacity
// on which it completes.
func ExampleMeasure() {
	traces, err := replay.Open("synth:batchwalk:seed=1,start=2,end=4")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range replay.Policies() {
		rep, err := replay.Measure(traces[0], p, replay.MeasureOptions{
			Device:      replay.SimDevice(80 << 30),
			MinCapacity: true,
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-8s reserved/live %.3f  min capacity/live %.3f\n", rep.Policy, rep.ReservedOverLive(), rep.MinCapacityOverLive())
	}
	// Output:
	// default  reserved/live 1.147  min capacity/live 1.060
	// roundup4 reserved/live 1.343  min capacity/live 1.137
	// maxsplit reserved/live 1.147  min capacity/live 1.060
	// gc       reserved/live 1.147  min capacity/live 1.058
	// paged    reserved/live 1.048  min capacity/live 1.011
}

func ExampleParsePolicies() {
	ps, err := replay.ParsePolicies("default,roundup4")
	fmt.Println(len(ps), ps[1].Conf, err)
	_, err = replay.ParsePolicies("fastest")
	fmt.Println(err)
	// Output:
	// 2 roundup_power2_divisions:4 <nil>
	// unknown policy "fastest" (known: default, roundup4, maxsplit, gc, paged, or all)
}
