// Command demo-upstream stands in for the internet in impyard's demo: on
// a loopback address it serves a few pages and a fake mail API that says
// what it received, so the demo can show which request got through and
// that the credential arrived without the box ever holding it.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "address to serve on")
	flag.Parse()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr())
	os.Stdout.Sync()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "the page at %s\n", r.URL.Path)
	})
	http.HandleFunc("/emails", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		auth := r.Header.Get("Authorization")
		shown := "none"
		if auth != "" {
			shown = auth[:min(len(auth), len("Bearer ")+4)] + strings.Repeat("*", 8)
		}
		log.Printf("mail API: %s %s, Authorization %s, Idempotency-Key %s: %s", r.Method, r.URL.Path, shown, r.Header.Get("Idempotency-Key"), body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg-%s","status":"queued"}`, r.Header.Get("Idempotency-Key"))
	})
	log.Fatal(http.Serve(ln, nil))
}
