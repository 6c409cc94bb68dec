package spec

import (
	"net/netip"
	"strings"
)

// ClientAddress is the address a front door limits a request by, from the
// direct peer (the address the connection came from) and the request's
// X-Forwarded-For values, read from the right:
//
//	chain := X-Forwarded-For entries, left to right, then peer
//	client := chain[len(chain)-1-TrustedProxyHops]
//
// With 0 hops (the default) the client is the peer and X-Forwarded-For is
// ignored, so a client cannot choose its address by sending the header.
// Each trusted proxy appends the address of its own peer; entries further
// left were written by whoever sent the request and are never used. When
// the last X-Forwarded-For entry already is the peer (Envoy with
// use_remote_address appends it before ext_authz sees the request), it is
// not counted twice. When the chain is shorter than the hops say, a proxy
// that should have appended did not: the peer is used rather than an
// address the client wrote. Addresses are returned in canonical form
// (IPv4-mapped IPv6 unmapped, ports dropped); an entry that is not an IP
// address is returned trimmed, as is.
func (d *Door) ClientAddress(peer string, xff []string) string {
	peer = canonicalAddr(peer)
	hops := d.TrustedProxyHops
	if hops == 0 || len(xff) == 0 {
		return peer
	}
	// Walk the entries from the right without splitting them all.
	seen, rightmost := 0, true
	for i := len(xff) - 1; i >= 0; i-- {
		v := xff[i]
		for v != "" {
			var entry string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				entry, v = v[j+1:], v[:j]
			} else {
				entry, v = v, ""
			}
			entry = strings.TrimSpace(entry)
			if entry == "" {
				continue
			}
			entry = canonicalAddr(entry)
			if rightmost && entry == peer {
				// The peer, appended by the front door itself.
				rightmost = false
				continue
			}
			rightmost = false
			if seen++; seen == hops {
				return entry
			}
		}
	}
	return peer
}

// canonicalAddr normalises an IP address, with or without a port.
func canonicalAddr(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Is4() {
			return s // ParseAddr takes only the canonical dotted form
		}
		return a.Unmap().WithZone("").String()
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone("").String()
	}
	return s
}
