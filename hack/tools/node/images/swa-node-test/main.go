// Command swa-node-test is the test container of the real node
// (internal/localcluster RealNodeTestImage): an HTTP server that answers every
// request with a message and its host name; with -exit N a process that exits
// with status N at once (CrashLoopBackOff); with -get URL a client that
// fetches URL once, prints the body (ending in a newline) and exits 0 (non-zero on an error or a
// status other than 200), so that a pod can fetch a page.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

func main() {
	addr := flag.String("addr", ":8080", "listen address")
	msg := flag.String("message", "hello from swa-node-test", "reply text")
	exit := flag.Int("exit", -1, "exit at once with this status (>= 0)")
	get := flag.String("get", "", "GET this URL once, print the body and exit")
	flag.Parse()
	if *exit >= 0 {
		fmt.Fprintf(os.Stderr, "exiting with status %d as asked\n", *exit)
		os.Exit(*exit)
	}
	if *get != "" {
		os.Exit(fetch(*get))
	}
	host, _ := os.Hostname()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s (pod %s, pid %d)\n", *msg, host, os.Getpid())
	})
	log.Printf("listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, nil))
}

// fetch GETs url, copies the body to stdout and returns the exit status.
func fetch(url string) int {
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Line-terminated, so that a page without a final newline does not run
	// into what a terminal prints next.
	if len(body) > 0 && body[len(body)-1] != '\n' {
		body = append(body, '\n')
	}
	os.Stdout.Write(body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "GET %s: %s\n", url, resp.Status)
		return 1
	}
	return 0
}
