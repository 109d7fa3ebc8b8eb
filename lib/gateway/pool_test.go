package gateway

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
)

// Many boxes calling one API at once keep their upstream connections:
// after rounds in which all of them wait on the upstream together, the
// upstream has seen one connection per box, not a new handshake for every
// request beyond a small per-host pool.
func TestManyBoxesKeepTheirUpstreamConnections(t *testing.T) {
	const boxes, rounds = 80, 3
	var mu sync.Mutex
	release := make(chan struct{})
	arrived := make(chan struct{}, boxes)
	conns := map[string]bool{} // the upstream's connections, by the gateway's end
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		wait := release
		conns[r.RemoteAddr] = true
		mu.Unlock()
		arrived <- struct{}{}
		<-wait
		io.WriteString(w, "ok")
	}))
	h := startGateway(t, policy(`{"name": "api", "match": {"host": "api.test", "method": "GET", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	clients := make([]*http.Client, boxes)
	for i := range clients {
		clients[i] = proxyClient(h, true)
	}
	u := fmt.Sprintf("https://api.test:%d/", ups.port)
	for r := range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, boxes)
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(u)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}()
		}
		// Every box's request is at the upstream at once before any is
		// answered, so each holds an upstream connection of its own.
		for range boxes {
			select {
			case <-arrived:
			case err := <-errs:
				t.Fatalf("round %d: %v", r, err)
			}
		}
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", r, err)
		}
	}
	if got := len(conns); got != boxes {
		t.Errorf("the upstream saw %d connections for %d boxes over %d rounds, want %d", got, boxes, rounds, boxes)
	}
}
