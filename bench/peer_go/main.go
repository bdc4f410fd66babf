// Peer: Go's goroutines, measured as weft's benchmarks measure tasks, with
// GOMAXPROCS=1 so that goroutines take turns on one thread as weft's tasks
// do on one loop.
//
//	bench_peer_go switch [-r rounds] [-n iters]
//	    peer_go_gosched  ns per runtime.Gosched with two goroutines
//	                     alternating (2M yields in all, time / 2M)
//	bench_peer_go spawn [-r rounds] [-n iters]
//	    peer_go_spawn_join  ns per `go f(); wait for it` (a WaitGroup)
//	bench_peer_go tasks [N]
//	    peer_go_tasks_spawn         ns per go statement creating N goroutines
//	    peer_go_tasks_spawn_faults  page faults per go statement
//	    peer_go_tasks_rss_per_task  (RSS with N goroutines blocked - RSS
//	                                before) / N, bytes
//
// Output lines are "name value unit", as bench.h prints them. The
// micro-benchmarks report the median of their timed rounds, after a warm-up
// round that is thrown away.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// cpuNow is the CPU time of the process (user and system) in nanoseconds.
// Not wall time, as in bench.h: other processes on the VM then do not count.
// With GOMAXPROCS=1 the goroutines measured run one at a time, and the
// runtime's own threads (the collector, sysmon) are charged too, as they
// should be: they are part of what goroutines cost.
func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// minorFaults is the number of page faults (no I/O) the process has taken.
func minorFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Minflt
}

func printFigure(name string, value float64, unit string) {
	if unit == "ns" {
		fmt.Printf("%s %.1f %s\n", name, value, unit)
	} else if unit == "faults" {
		fmt.Printf("%s %.2f %s\n", name, value, unit)
	} else {
		fmt.Printf("%s %.0f %s\n", name, value, unit)
	}
}

func median(v []float64) float64 {
	sort.Float64s(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// rounds runs one warm-up round of f and then r timed ones; f returns the
// figure of one round.
func rounds(name string, r int, verbose bool, f func() float64) {
	f()
	v := make([]float64, 0, r)
	for i := 0; i < r; i++ {
		x := f()
		if verbose {
			fmt.Fprintf(os.Stderr, "%s round %d: %.2f\n", name, i+1, x)
		}
		v = append(v, x)
	}
	printFigure(name, median(v), "ns")
}

func goschedRound(m int) float64 {
	var wg sync.WaitGroup
	body := func() {
		for i := 0; i < m; i++ {
			runtime.Gosched()
		}
		wg.Done()
	}
	t0 := cpuNow()
	wg.Add(2)
	go body()
	go body()
	wg.Wait()
	return float64(cpuNow()-t0) / float64(2*m)
}

func spawnRound(n int) float64 {
	var wg sync.WaitGroup
	t0 := cpuNow()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { wg.Done() }()
		wg.Wait()
	}
	return float64(cpuNow()-t0) / float64(n)
}

// rssBytes is the second field of /proc/self/statm, in bytes.
func rssBytes() float64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return -1
	}
	pages, err := strconv.ParseFloat(f[1], 64)
	if err != nil {
		return -1
	}
	return pages * float64(os.Getpagesize())
}

func tasks(n int) {
	// No collection while we count: the goroutines and their stacks are all
	// live anyway, and a GC cycle in the middle would only add noise.
	debug.SetGCPercent(-1)
	block := make(chan struct{})
	var started, ended sync.WaitGroup
	rss0 := rssBytes()
	started.Add(n)
	ended.Add(n)
	f0 := minorFaults()
	t0 := cpuNow()
	for i := 0; i < n; i++ {
		go func() {
			started.Done()
			<-block
			ended.Done()
		}()
	}
	t1 := cpuNow()
	f1 := minorFaults()
	started.Wait() // every goroutine has run and is blocked on `block`
	rss1 := rssBytes()
	close(block)
	ended.Wait()
	printFigure("peer_go_tasks_count", float64(n), "tasks")
	printFigure("peer_go_tasks_spawn", float64(t1-t0)/float64(n), "ns")
	printFigure("peer_go_tasks_spawn_faults", float64(f1-f0)/float64(n), "faults")
	printFigure("peer_go_tasks_rss_per_task", (rss1-rss0)/float64(n), "bytes")
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bench_peer_go switch|spawn [-r rounds] [-n iterations] [-v]\n       bench_peer_go tasks [N]")
	os.Exit(2)
}

func main() {
	runtime.GOMAXPROCS(1)
	if len(os.Args) < 2 {
		usage()
	}
	what := os.Args[1]
	if what == "tasks" {
		n := 1000000
		if len(os.Args) > 3 {
			usage()
		}
		if len(os.Args) == 3 {
			var err error
			if n, err = strconv.Atoi(os.Args[2]); err != nil || n < 1 {
				usage()
			}
		}
		tasks(n)
		return
	}
	fs := flag.NewFlagSet(what, flag.ExitOnError)
	r := fs.Int("r", 7, "timed rounds")
	n := fs.Int("n", 0, "iterations per round")
	v := fs.Bool("v", false, "print every round to stderr")
	fs.Parse(os.Args[2:])
	if *r < 1 || fs.NArg() != 0 {
		usage()
	}
	switch what {
	case "switch":
		if *n == 0 {
			*n = 1000000
		}
		rounds("peer_go_gosched", *r, *v, func() float64 { return goschedRound(*n) })
	case "spawn":
		if *n == 0 {
			*n = 300000
		}
		rounds("peer_go_spawn_join", *r, *v, func() float64 { return spawnRound(*n) })
	default:
		usage()
	}
}
