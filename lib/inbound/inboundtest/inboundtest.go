// Package inboundtest signs and sends deliveries the way GitHub and
// Discord do, and reads back the relay's records, for the tests of
// lib/inbound and of impgw running it.
package inboundtest

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/inbound"
	"github.com/impyard/impyard/lib/store"
)

// HubSignature is GitHub's X-Hub-Signature-256 value for body under key.
func HubSignature(key string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// DiscordHeaders are Discord's signature headers for body sent at at.
func DiscordHeaders(priv ed25519.PrivateKey, body string, at time.Time) map[string]string {
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := ed25519.Sign(priv, []byte(ts+body))
	return map[string]string{inbound.DiscordSignature: hex.EncodeToString(sig), inbound.DiscordTimestamp: ts}
}

// Post sends body to url with hdr and returns the status and answer.
func Post(t testing.TB, url string, body []byte, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Records are the delivery records in the audit log at path, in order.
func Records(t testing.TB, path string) []inbound.Record {
	t.Helper()
	var out []inbound.Record
	if _, err := store.ReadJSONL(path, func(line []byte) error {
		var r inbound.Record
		if json.Unmarshal(line, &r) == nil && r.Schema == inbound.RecordSchema {
			out = append(out, r)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}
