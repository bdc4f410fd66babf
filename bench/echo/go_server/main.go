// The echo benchmark's Go peer: one goroutine per connection, GOMAXPROCS=1
// so that the goroutines take turns on one thread as weft's tasks do on one
// loop. The standard library only.
//
//	echo_server_go PORT    listens on 127.0.0.1:PORT until killed
//
// Each goroutine reads up to 64 KiB and writes it back (conn.Write writes
// all of it). Go's net package sets TCP_NODELAY on every TCP connection,
// as the other servers of bench/echo do by hand.
package main

import (
	"fmt"
	"net"
	"os"
	"runtime"
)

func echo(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 65536)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: echo_server_go PORT")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(1)
	ln, err := net.Listen("tcp4", "127.0.0.1:"+os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "echo_server_go:", err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			fmt.Fprintln(os.Stderr, "echo_server_go: accept:", err)
			os.Exit(1)
		}
		go echo(c)
	}
}
