package config

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
)

// Inbound source kinds.
const (
	InboundHMAC    = "hmac-sha256"
	InboundDiscord = "discord"
)

// Defaults of an hmac-sha256 source's headers, as GitHub sends them.
const (
	DefaultSignatureHeader = "X-Hub-Signature-256"
	DefaultDeliveryHeader  = "X-GitHub-Delivery"
)

// Inbound is [inbound]: the relay's own listener and the sources allowed
// to file tasks through it.
type Inbound struct {
	// Listen is where impgw serves POST /v1/inbound/<source>; "" serves
	// no relay.
	Listen string `toml:"listen"`
	// TLSCert and TLSKey, PEM files (relative ones in IMPYARD_HOME),
	// make the listener serve HTTPS: senders such as Discord deliver
	// only to https URLs.
	TLSCert string          `toml:"tls_cert"`
	TLSKey  string          `toml:"tls_key"`
	Sources []InboundSource `toml:"source"`
	// ConnsPerClient bounds the connections one client address (an IPv6
	// one by its /64) holds open at once; more are closed as they are
	// accepted, so one sender never holds more than this many of the
	// relay's delivery slots. 0 is DefaultConnsPerClient.
	ConnsPerClient int `toml:"conns_per_client"`
	// MinBodyRate is the slowest a body may arrive, in bytes a second,
	// once its headers are read; a sender below it loses its slot. 0 is
	// DefaultMinBodyRate.
	MinBodyRate int64 `toml:"min_body_rate"`
	// HeaderTimeout bounds the read of a request's headers, TLS
	// handshake included; 0 is DefaultInboundHeaderTimeout.
	HeaderTimeout Duration `toml:"header_timeout"`
}

// Defaults and bounds of the relay's limits on slow senders.
const (
	DefaultConnsPerClient = 4
	// MaxConnsPerClient is half the relay's 16 delivery slots: a sender
	// holding its every connection leaves the other half free.
	MaxConnsPerClient           = 8
	DefaultMinBodyRate          = 1024
	DefaultInboundHeaderTimeout = 5 * time.Second
)

// InboundSource is one [[inbound.source]] entry.
type InboundSource struct {
	Name string `toml:"name"`
	Imp  string `toml:"imp"`
	Kind string `toml:"kind"`
	// Secret names the HMAC key in IMPYARD_HOME/secrets (hmac-sha256).
	Secret         string `toml:"secret"`
	Header         string `toml:"header"`
	DeliveryHeader string `toml:"delivery_header"`
	// PublicKey is the Discord application's Ed25519 key, hex.
	PublicKey string `toml:"public_key"`
	// Owners are the Discord user ids allowed to file tasks.
	Owners []string `toml:"owners"`
}

// Source returns the source called name, or nil.
func (in *Inbound) Source(name string) *InboundSource {
	for i := range in.Sources {
		if in.Sources[i].Name == name {
			return &in.Sources[i]
		}
	}
	return nil
}

func (o *Org) inboundDefaults() {
	if o.Inbound.ConnsPerClient == 0 {
		o.Inbound.ConnsPerClient = DefaultConnsPerClient
	}
	if o.Inbound.MinBodyRate == 0 {
		o.Inbound.MinBodyRate = DefaultMinBodyRate
	}
	if o.Inbound.HeaderTimeout.Duration == 0 {
		o.Inbound.HeaderTimeout.Duration = DefaultInboundHeaderTimeout
	}
	for i := range o.Inbound.Sources {
		s := &o.Inbound.Sources[i]
		if s.Kind != InboundHMAC {
			continue
		}
		if s.Header == "" {
			s.Header = DefaultSignatureHeader
		}
		if s.DeliveryHeader == "" {
			s.DeliveryHeader = DefaultDeliveryHeader
		}
	}
}

// checkInbound refuses a source that could never verify a delivery, or
// keys of one kind set on another: a key that is silently ignored is a
// check the owner believes in and does not have.
func (o *Org) checkInbound(p string, b []byte) error {
	in := &o.Inbound
	if len(in.Sources) > 0 && in.Listen == "" {
		return bad(p, b, "inbound", "[[inbound.source]] entries need [inbound] listen")
	}
	if (in.TLSCert == "") != (in.TLSKey == "") {
		return bad(p, b, "tls_cert", "[inbound] tls_cert and tls_key go together")
	}
	if in.TLSCert != "" && in.Listen == "" {
		return bad(p, b, "tls_cert", "[inbound] tls_cert needs listen")
	}
	if in.ConnsPerClient < 0 || in.ConnsPerClient > MaxConnsPerClient {
		return bad(p, b, "conns_per_client", "[inbound] conns_per_client must be 1 to %d (half the relay's delivery slots), not %d", MaxConnsPerClient, in.ConnsPerClient)
	}
	if in.MinBodyRate < 0 {
		return bad(p, b, "min_body_rate", "[inbound] min_body_rate must be positive (bytes a second), not %d", in.MinBodyRate)
	}
	seen := map[string]bool{}
	for i, s := range in.Sources {
		where := fmt.Sprintf("[[inbound.source]] #%d", i+1)
		if err := id.CheckName(s.Name); err != nil {
			return bad(p, b, "name", "%s: %v", where, err)
		}
		if seen[s.Name] {
			return bad(p, b, "name", "%s: a second source is called %q", where, s.Name)
		}
		seen[s.Name] = true
		if err := id.CheckName(s.Imp); err != nil {
			return bad(p, b, "imp", "%s (%s): %v", where, s.Name, err)
		}
		switch s.Kind {
		case InboundHMAC:
			if s.Secret == "" || strings.ContainsAny(s.Secret, `/\`) || strings.HasPrefix(s.Secret, ".") {
				return bad(p, b, "secret", "%s (%s): secret must name a file in IMPYARD_HOME/secrets", where, s.Name)
			}
			if s.PublicKey != "" || s.Owners != nil {
				return bad(p, b, "public_key", "%s (%s): public_key and owners are for discord sources", where, s.Name)
			}
		case InboundDiscord:
			if k, err := hex.DecodeString(s.PublicKey); err != nil || len(k) != 32 {
				return bad(p, b, "public_key", "%s (%s): want the application's Ed25519 public key, 64 hex digits", where, s.Name)
			}
			if len(s.Owners) == 0 {
				return bad(p, b, "owners", "%s (%s): name the Discord user ids allowed to file tasks", where, s.Name)
			}
			for _, u := range s.Owners {
				if u == "" || len(u) > 32 || strings.Trim(u, "0123456789") != "" {
					return bad(p, b, "owners", "%s (%s): %q is not a Discord user id (digits)", where, s.Name, u)
				}
			}
			if s.Secret != "" || s.Header != "" || s.DeliveryHeader != "" {
				return bad(p, b, "secret", "%s (%s): secret, header and delivery_header are for hmac-sha256 sources", where, s.Name)
			}
		default:
			return bad(p, b, "kind", "%s (%s): kind %q is not hmac-sha256 or discord", where, s.Name, s.Kind)
		}
	}
	return nil
}
