package serve

import (
	"syscall"
	"time"
)

type syscallRusage struct{ ru syscall.Rusage }

func getRusage(r *syscallRusage) { syscall.Getrusage(syscall.RUSAGE_SELF, &r.ru) }

// cpu is user plus system time.
func (r *syscallRusage) cpu() time.Duration {
	return time.Duration(r.ru.Utime.Nano() + r.ru.Stime.Nano())
}
