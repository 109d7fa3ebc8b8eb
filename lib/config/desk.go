package config

import (
	"net/url"
	"strconv"
	"strings"
)

// DefaultDeskListen is where impgate serve listens without [desk] listen.
const DefaultDeskListen = "127.0.0.1:7400"

// Desk is [desk]: the web desk impgate serve runs for the owner's phone.
type Desk struct {
	// Listen is the desk's address; "" is DefaultDeskListen.
	Listen string `toml:"listen"`
	// TLSCert and TLSKey, PEM files (relative ones in IMPYARD_HOME),
	// make it serve HTTPS; without them it serves plain HTTP on loopback
	// only.
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// Origin is the WebAuthn origin the browser shows (scheme, host and
	// port, no path); its host is the relying party id. "" is
	// http://localhost:PORT of listen.
	Origin string `toml:"origin"`
	// URL is where a notification links a filed gate (URL/g/<id>); ""
	// links nothing.
	URL string `toml:"url"`
}

// DeskListen is the address the desk listens on.
func (d *Desk) DeskListen() string {
	if d.Listen == "" {
		return DefaultDeskListen
	}
	return d.Listen
}

// DeskOrigin is the WebAuthn origin of the desk.
func (d *Desk) DeskOrigin() string {
	if d.Origin != "" {
		return strings.TrimSuffix(d.Origin, "/")
	}
	return "http://localhost:" + deskPort(d.DeskListen())
}

// RPID is the relying party id: the origin's host.
func (d *Desk) RPID() string {
	u, err := url.Parse(d.DeskOrigin())
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// GateLink is the desk's page of gate id, or "" without [desk] url.
func (d *Desk) GateLink(id string) string {
	if d.URL == "" {
		return ""
	}
	return strings.TrimSuffix(d.URL, "/") + "/g/" + id
}

func (o *Org) checkDesk(p string, b []byte) error {
	d := &o.Desk
	if (d.TLSCert == "") != (d.TLSKey == "") {
		return bad(p, b, "tls_cert", "[desk] tls_cert and tls_key go together")
	}
	if deskPort(d.DeskListen()) == "" {
		return bad(p, b, "listen", "[desk] listen %q: want HOST:PORT", d.Listen)
	}
	if d.Origin != "" {
		u, err := url.Parse(d.Origin)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.User != nil {
			return bad(p, b, "origin", "[desk] origin %q: want scheme://host[:port] and nothing more, as https://desk.example.com", d.Origin)
		}
	}
	if d.URL != "" {
		u, err := url.Parse(d.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.User != nil {
			return bad(p, b, "url", "[desk] url %q: want an http(s) URL without query", d.URL)
		}
	}
	return nil
}

// deskPort is the port of a HOST:PORT address, or "". It is spelled out
// rather than taken from package net, which every command reading
// org.toml, impq among them, would then link.
func deskPort(addr string) string {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return ""
	}
	if n, err := strconv.Atoi(addr[i+1:]); err != nil || n < 1 || n > 65535 {
		return ""
	}
	return addr[i+1:]
}
