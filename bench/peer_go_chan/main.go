// Peer of bench/chan.c: Go's channels, select, sync.Mutex and a
// goroutine-per-actor counter/printer pair, measured as chan.c measures
// weft's.
//
//	bench_peer_go_chan [-p procs] [-r rounds] [-n N] [-v]
//
// GOMAXPROCS is 1 by default (-p 1): weft runs a loop's tasks on one thread,
// one at a time, so the fair comparison is goroutines taking turns on one
// P, where a channel hand-off is a goroutine switch on the same thread and
// sync.Mutex never spins (it spins only with GOMAXPROCS > 1). The figures
// are then named go_NAME. With -p 2 (two Ps, which run.sh starts unpinned,
// so that the two can really be on two CPUs) they are named go_p2_NAME: a
// hand-off then often crosses threads, with futex wake-ups and spinning,
// all of which counts since the clock is the CPU time of the whole process.
//
// Figures, the same as chan.c's (see its header), each the median of the
// timed rounds (default 7) after one warm-up round that is thrown away:
//
//	chan_pingpong_unbuffered  ns per message, one direction: goroutine A
//	                          sends i on c1, B receives it and sends it back
//	                          on c2, A receives it; round trips / 2
//	chan_pingpong_buffered    the same with channels of capacity 16
//	select_pingpong           the same on unbuffered channels, every receive
//	                          a 2-case select: { v := <-c1; <-quit } (quit
//	                          is a real channel on which nothing is sent)
//	mutex_uncontended         ns per mu.Lock(); mu.Unlock(), one goroutine
//	mutex_contended           two goroutines, each looping mu.Lock();
//	                          runtime.Gosched(); mu.Unlock(): ns per lock
//	                          taken (both goroutines' locks counted)
//	mutex_contended_handoffs  percent of those locks that went to the other
//	                          goroutine than the last owner. sync.Mutex lets
//	                          a goroutine that was not waiting take the lock
//	                          ahead of a woken waiter (until the waiter has
//	                          waited 1 ms: "starvation mode"), so it is not
//	                          100, where weft's FIFO mutex hands off on
//	                          every unlock
//	actor_msgs_per_s          seed 000's counter/printer pair as two
//	                          goroutines with channels as mailboxes (capacity
//	                          1024: a Go channel is bounded, weft's and the
//	                          seed's mailboxes are not; the counter's own
//	                          never holds more than one). The counter counts
//	                          down from N, sending n to the printer and n-1
//	                          to itself; the printer counts, prints nothing.
//	                          2N / CPU time
//
// -n N (default 1,000,000) sets the operations per round as in chan.c: the
// same counts for the same figures. The clock is getrusage's user + system
// time of the process, as in bench/peer_go.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"
)

func cpuNow() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

var prefix = "go_"

func printFigure(name string, value float64, unit string) {
	if unit == "ns" {
		fmt.Printf("%s%s %.1f %s\n", prefix, name, value, unit)
	} else if unit == "pct" {
		fmt.Printf("%s%s %.2f %s\n", prefix, name, value, unit)
	} else {
		fmt.Printf("%s%s %.0f %s\n", prefix, name, value, unit)
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

func rounds(name, unit string, r int, verbose bool, f func() float64) {
	f()
	v := make([]float64, 0, r)
	for i := 0; i < r; i++ {
		x := f()
		if verbose {
			fmt.Fprintf(os.Stderr, "%s%s round %d: %.2f\n", prefix, name, i+1, x)
		}
		v = append(v, x)
	}
	printFigure(name, median(v), unit)
}

// ---- ping-pong -----------------------------------------------------------

func pingpongRound(m int, capacity int) float64 {
	c1 := make(chan int, capacity)
	c2 := make(chan int, capacity)
	done := make(chan struct{})
	go func() {
		for v := range c1 {
			c2 <- v
		}
		close(done)
	}()
	t0 := cpuNow()
	for i := 0; i < m; i++ {
		c1 <- i
		if <-c2 != i {
			panic("ping-pong: wrong value")
		}
	}
	t1 := cpuNow()
	close(c1)
	<-done
	return float64(t1-t0) / float64(2*m)
}

func selectRound(m int) float64 {
	c1 := make(chan int)
	c2 := make(chan int)
	quit1 := make(chan int)
	quit2 := make(chan int)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case v := <-c1:
				if v < 0 {
					close(done)
					return
				}
				c2 <- v
			case <-quit1:
				panic("select: quit")
			}
		}
	}()
	t0 := cpuNow()
	for i := 0; i < m; i++ {
		c1 <- i
		select {
		case v := <-c2:
			if v != i {
				panic("select: wrong value")
			}
		case <-quit2:
			panic("select: quit")
		}
	}
	t1 := cpuNow()
	c1 <- -1
	<-done
	return float64(t1-t0) / float64(2*m)
}

// ---- mutex ---------------------------------------------------------------

func mutexUncontendedRound(m int) float64 {
	var mu sync.Mutex
	t0 := cpuNow()
	for i := 0; i < m; i++ {
		mu.Lock()
		mu.Unlock()
	}
	return float64(cpuNow()-t0) / float64(m)
}

var lastHandoffs float64

func mutexContendedRound(m int) float64 {
	var mu sync.Mutex
	var wg sync.WaitGroup
	last := -1
	handoffs := 0
	body := func(id int) {
		for i := 0; i < m; i++ {
			mu.Lock()
			if last != id {
				handoffs++
				last = id
			}
			runtime.Gosched()
			mu.Unlock()
		}
		wg.Done()
	}
	t0 := cpuNow()
	wg.Add(2)
	go body(0)
	go body(1)
	wg.Wait()
	t1 := cpuNow()
	lastHandoffs = 100 * float64(handoffs) / float64(2*m)
	return float64(t1-t0) / float64(2*m)
}

// ---- actors --------------------------------------------------------------

func actorRound(n int) float64 {
	counterBox := make(chan int, 1024)
	printerBox := make(chan int, 1024)
	done := make(chan int)
	go func() { // printer
		got := 0
		for range printerBox {
			got++
		}
		done <- got
	}()
	go func() { // counter
		for {
			v := <-counterBox
			if v == 0 {
				break
			}
			printerBox <- v
			counterBox <- v - 1
		}
		close(printerBox)
	}()
	t0 := cpuNow()
	counterBox <- n
	got := <-done
	t1 := cpuNow()
	if got != n {
		panic("actors: the printer got the wrong count")
	}
	return 2 * float64(n) / (float64(t1-t0) / 1e9)
}

func main() {
	p := flag.Int("p", 1, "GOMAXPROCS")
	r := flag.Int("r", 7, "timed rounds")
	n := flag.Int("n", 1000000, "operations per round, scaled per figure")
	v := flag.Bool("v", false, "print every round to stderr")
	flag.Parse()
	if *p < 1 || *r < 1 || *n < 1 || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: bench_peer_go_chan [-p procs] [-r rounds] [-n N] [-v]")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*p)
	if *p != 1 {
		prefix = fmt.Sprintf("go_p%d_", *p)
	}
	// Operations per round: N / div, the same table as chan.c's.
	ops := func(div int) int {
		if m := *n / div; m > 0 {
			return m
		}
		return 1
	}
	rounds("chan_pingpong_unbuffered", "ns", *r, *v, func() float64 { return pingpongRound(ops(5), 0) })
	rounds("chan_pingpong_buffered", "ns", *r, *v, func() float64 { return pingpongRound(ops(5), 16) })
	rounds("select_pingpong", "ns", *r, *v, func() float64 { return selectRound(ops(5)) })
	rounds("mutex_uncontended", "ns", *r, *v, func() float64 { return mutexUncontendedRound(ops(1) * 10) })
	var h []float64
	rounds("mutex_contended", "ns", *r, *v, func() float64 {
		x := mutexContendedRound(ops(5))
		h = append(h, lastHandoffs)
		return x
	})
	printFigure("mutex_contended_handoffs", median(h[1:]), "pct")
	rounds("actor_msgs_per_s", "msgs/s", *r, *v, func() float64 { return actorRound(ops(5)) })
}
