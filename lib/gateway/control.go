package gateway

import (
	"net/http"
	"strings"

	"github.com/impyard/impyard/lib/http1"
)

// control answers an origin-form request: the gateway's own API. It
// serves fixed answers only, nothing from any file, so nothing under
// IMPYARD_HOME (the CA key, secrets) can ever be read through it.
func (s *session) control(rec *Record, req *http1.Request) bool {
	if _, err := s.readBody(req); err != nil {
		s.reject(rec, err)
		return false
	}
	path, _, _ := strings.Cut(req.Target, "?")
	status, body := http.StatusNotFound, `{"error":"no such endpoint"}`
	switch {
	case path == "/v1/health" && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		status, body = http.StatusOK, `{"status":"ok"}`
	case path == "/v1/health":
		status, body = http.StatusMethodNotAllowed, `{"error":"method not allowed"}`
	case !strings.HasPrefix(path, "/v1/"):
		body = `{"error":"no such endpoint; to go through the gateway, send an absolute URL or CONNECT"}`
	}
	h := http.Header{"Content-Type": {"application/json"}}
	if status == http.StatusMethodNotAllowed {
		h["Allow"] = []string{"GET, HEAD"}
	}
	b := []byte(body + "\n")
	if req.Method == http.MethodHead {
		b = nil
	}
	if err := http1.WriteSimple(s.bw, req.Minor, status, h, b, req.Close); err != nil {
		return false
	}
	return !req.Close
}
