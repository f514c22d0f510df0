// Command swa-node-test is the test container of hack/realnode: an HTTP
// server that answers every request with a message and its host name, or,
// with -exit N, a process that exits with status N at once (CrashLoopBackOff).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	msg := flag.String("message", "hello from swa-node-test", "reply text")
	exit := flag.Int("exit", -1, "exit at once with this status (>= 0)")
	flag.Parse()
	if *exit >= 0 {
		fmt.Fprintf(os.Stderr, "exiting with status %d as asked\n", *exit)
		os.Exit(*exit)
	}
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s (pod %s, pid %d)\n", *msg, host, os.Getpid())
	})
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}
