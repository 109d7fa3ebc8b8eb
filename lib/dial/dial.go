// Package dial resolves host names and connects only to the address that
// was checked: the gateway judges a name, resolves it here, judges each
// address, and then hands the one it approved to Upstream or Conn, which
// dial that address and nothing else. No second resolution happens between
// the check and the connect, so DNS rebinding cannot swap the target.
//
// Guarantees:
//   - Lookup returns addresses unmapped (::ffff:127.0.0.1 becomes
//     127.0.0.1), so a check on them sees the family they will be dialed in;
//     an IP literal is returned as is, with no lookup.
//   - An Upstream's connection pool is keyed by the checked address as
//     well as the host name, so a connection dialed for one (host,
//     address) pair is never reused for another; TLS to the upstream is
//     always verified against the roots given, for the request's host
//     name, and speaks HTTP/1.1 only.
//   - Environment proxies (HTTP_PROXY and friends) are never used.
package dial

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Resolver looks names up with a timeout and keeps answers for a short
// while. Caching is safe against rebinding because every use of an answer
// is checked before it is dialed.
type Resolver struct {
	timeout time.Duration
	ttl     time.Duration
	lookup  LookupFunc

	mu    sync.Mutex
	cache map[string]answer
}

type answer struct {
	addrs   []netip.Addr
	expires time.Time
}

const maxCached = 4096

// LookupFunc resolves a host name to addresses.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// NewResolver returns a Resolver that asks lookup, or the system resolver
// when lookup is nil. ttl 0 disables the cache.
func NewResolver(timeout, ttl time.Duration, lookup LookupFunc) *Resolver {
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	return &Resolver{timeout: timeout, ttl: ttl, lookup: lookup, cache: make(map[string]answer)}
}

// Lookup returns the addresses of host, a canonical host name or IP literal.
func (r *Resolver) Lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, nil
	}
	now := time.Now()
	if r.ttl > 0 {
		r.mu.Lock()
		ans, ok := r.cache[host]
		r.mu.Unlock()
		if ok && now.Before(ans.expires) {
			return ans.addrs, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	found, err := r.lookup(ctx, host)
	if err != nil {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return nil, fmt.Errorf("%s does not resolve", host)
		}
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	addrs := make([]netip.Addr, 0, len(found))
	seen := make(map[netip.Addr]bool, len(found))
	for _, a := range found {
		a = a.Unmap()
		if !seen[a] {
			seen[a] = true
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%s resolves to no address", host)
	}
	if r.ttl > 0 {
		r.mu.Lock()
		if len(r.cache) >= maxCached {
			for k := range r.cache {
				delete(r.cache, k)
				if len(r.cache) < maxCached/2 {
					break
				}
			}
		}
		r.cache[host] = answer{addrs: addrs, expires: now.Add(r.ttl)}
		r.mu.Unlock()
	}
	return addrs, nil
}

// Options tune upstream connections.
type Options struct {
	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	IdleConnTimeout       time.Duration
	// MaxIdlePerHost bounds the kept-alive connections per (host, address).
	MaxIdlePerHost int
	// Dial connects to a checked address; nil means TCP. It must reach that
	// address and no other (a test points it at a loopback server).
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

// Conn opens a connection to addr, for a tunnel or an upstream request.
func (o *Options) Conn(ctx context.Context, addr netip.AddrPort) (net.Conn, error) {
	if o.Dial != nil {
		return o.Dial(ctx, addr)
	}
	d := &net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}
	return d.DialContext(ctx, "tcp", addr.String())
}

// Roots returns the system roots (which honour SSL_CERT_FILE and
// SSL_CERT_DIR) plus the certificates in bundle, a PEM file's content. A
// non-empty bundle with no certificate in it is an error, not a silent
// fallback to the system roots.
func Roots(bundle []byte) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if len(bundle) > 0 && !pool.AppendCertsFromPEM(bundle) {
		return nil, errors.New("no PEM certificate in the CA bundle")
	}
	return pool, nil
}
