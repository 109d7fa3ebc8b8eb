// Package health checks that impgw answers at its control address, the
// one check the supervisor, the executors and status make before work
// that goes through the gateway. It is a package of its own so that the
// commands that only file and read records (impq) do not link net/http:
// a whole HTTP client's code and init cost every impq add its time.
package health

import (
	"fmt"
	"net/http"
	"time"

	"github.com/impyard/impyard/lib/temporary"
)

// ErrGatewayDown means impgw does not answer at its control address, so
// whatever needed it (a box, an HTTP action) is not begun and can be
// tried again later.
var ErrGatewayDown = temporary.New("gateway unreachable")

// healthTimeout bounds one health check.
const healthTimeout = 2 * time.Second

// GatewayUp checks that impgw answers GET /v1/health at listen (org.toml's
// gateway.listen). It is the one check the supervisor and the executors
// make before they commit to work that goes through the gateway; the
// error wraps ErrGatewayDown.
func GatewayUp(listen string) error {
	c := http.Client{Timeout: healthTimeout}
	resp, err := c.Get("http://" + listen + "/v1/health")
	if err != nil {
		return fmt.Errorf("%w: impgw at %s does not answer (is impgw serve running?): %w", ErrGatewayDown, listen, err)
	}
	resp.Body.Close()
	return nil
}
