// Command wsbench measures issue 26's targets on the real server (bench/wsload;
// docs/websocket.md, "Measured").
//
//	make build && go run ./bench/cmd/wsbench -conns 10000 -echo 50
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/peregrinephp/peregrine/bench/wsload"
)

func main() {
	conns := flag.Int("conns", 10000, "idle connections, all in one channel")
	echo := flag.Int("echo", 50, "connections echoing through PHP, and HTTP clients for the hello-world rate")
	dur := flag.Duration("for", 5*time.Second, "length of each rate pass")
	workers := flag.Int("workers", 2, "PHP workers")
	flag.Parse()
	root, _ := os.Getwd()
	res, err := wsload.Run(context.Background(), wsload.Options{Peregrine: "bin/peregrine", Root: root,
		Conns: *conns, Echo: *echo, Workers: *workers, Duration: *dur})
	if err != nil {
		fmt.Fprintln(os.Stderr, "wsbench:", err)
		os.Exit(1)
	}
	fmt.Print(res)
}
