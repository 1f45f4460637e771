// gorelay: the least a TCP relay does, for benchmarks/link_overhead.py's yardstick.
//
// Each accepted connection is dialled to the upstream and copied both ways with io.Copy (Go's netpoller,
// splice where the kernel offers it); nothing is read or parsed. What `drill link` adds beyond what this
// adds, placed on the same core, is the link's own cost; what both add is the box's (a wakeup per
// segment on a core that was idle).
//
//	gorelay UPSTREAM PORTFILE
package main

import (
	"fmt"
	"io"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gorelay UPSTREAM PORTFILE")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	if err := os.WriteFile(os.Args[2]+".partial", []byte(port), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Rename(os.Args[2]+".partial", os.Args[2])
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go relay(c.(*net.TCPConn), os.Args[1])
	}
}

func relay(c *net.TCPConn, upstream string) {
	u, err := net.Dial("tcp", upstream)
	if err != nil {
		c.Close()
		return
	}
	up := u.(*net.TCPConn)
	go func() {
		io.Copy(up, c)
		up.CloseWrite()
	}()
	io.Copy(c, up)
	c.CloseWrite()
}
