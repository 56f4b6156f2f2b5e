package zmtp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// Frame flags (ZMTP 3.x, RFC 23 and 37).
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

const (
	// greetingSize is the length of a ZMTP 3 greeting.
	greetingSize = 64
	// maxCommandSize bounds a command's body. The commands a NULL peer
	// sends (READY with a socket type, an identity of at most 255 bytes
	// and a little application metadata; PING; ERROR) are far smaller.
	maxCommandSize = 16 << 10
	// maxShortSize is the largest body a short frame header describes.
	maxShortSize = 255
	// maxIdentitySize bounds a peer's Identity (RFC 37).
	maxIdentitySize = 255
)

// Socket types this package speaks, and the peers each accepts.
const (
	typeSub    = "SUB"
	typeDealer = "DEALER"
)

var compatible = map[string][]string{
	typeSub:    {"PUB", "XPUB"},
	typeDealer: {"ROUTER"},
}

// greeting is this side's greeting: ZMTP 3.1, NULL, not a server. The
// padding's last byte is 1, as libzmq sends it, so that a ZMTP 1.0 peer
// reads a one-byte identity.
var greeting = func() [greetingSize]byte {
	var g [greetingSize]byte
	g[0], g[8], g[9] = 0xFF, 0x01, 0x7F
	g[10], g[11] = 3, 1
	copy(g[12:32], "NULL")
	return g
}()

// checkSignature checks the greeting's first 10 bytes.
func checkSignature(b []byte) error {
	if b[0] != 0xFF || b[9]&0x01 == 0 {
		return fmt.Errorf("%w: no ZMTP signature (%x)", ErrGreeting, b[:10])
	}
	return nil
}

// checkVersion checks the greeting's major version: ZMTP 3 or later,
// which a ZMTP 3.1 peer talks to as 3.x.
func checkVersion(major byte) error {
	if major < 3 {
		return fmt.Errorf("%w: ZMTP major version %d, want 3", ErrGreeting, major)
	}
	return nil
}

// checkMechanism checks the greeting's mechanism field: NULL, padded with
// zeros.
func checkMechanism(mech []byte) error {
	name := mech
	if i := bytes.IndexByte(mech, 0); i >= 0 {
		name = mech[:i]
		if bytes.ContainsFunc(mech[i:], func(r rune) bool { return r != 0 }) {
			return fmt.Errorf("%w: malformed mechanism %q", ErrGreeting, mech)
		}
	}
	if string(name) != "NULL" {
		return fmt.Errorf("%w: security mechanism %q, want NULL", ErrGreeting, name)
	}
	return nil
}

// appendFrame appends one frame: its header and body.
func appendFrame(dst []byte, flags byte, body []byte) []byte {
	if len(body) <= maxShortSize {
		dst = append(dst, flags, byte(len(body)))
	} else {
		dst = append(dst, flags|flagLong)
		dst = binary.BigEndian.AppendUint64(dst, uint64(len(body)))
	}
	return append(dst, body...)
}

// appendCommand appends a command frame: the name, then data.
func appendCommand(dst []byte, name string, data ...[]byte) []byte {
	body := make([]byte, 0, 1+len(name)+64)
	body = append(body, byte(len(name)))
	body = append(body, name...)
	for _, d := range data {
		body = append(body, d...)
	}
	return appendFrame(dst, flagCommand, body)
}

// property returns one metadata property: a name of 1-255 bytes and a
// value.
func property(name string, value []byte) []byte {
	p := make([]byte, 0, 1+len(name)+4+len(value))
	p = append(p, byte(len(name)))
	p = append(p, name...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(value)))
	return append(p, value...)
}

// readyCommand is the READY a socket of type self sends.
func readyCommand(self string) []byte {
	props := [][]byte{property("Socket-Type", []byte(self))}
	if self == typeDealer {
		// As libzmq does for DEALER: an empty identity, which the ROUTER
		// replaces with one of its own.
		props = append(props, property("Identity", nil))
	}
	return appendCommand(nil, "READY", props...)
}

// parseCommand splits a command body into its name and data.
func parseCommand(body []byte) (name string, data []byte, err error) {
	if len(body) == 0 || body[0] == 0 || int(body[0]) > len(body)-1 {
		return "", nil, fmt.Errorf("%w: malformed command", ErrProtocol)
	}
	n := int(body[0])
	return string(body[1 : 1+n]), body[1+n:], nil
}

// peerSocketType reads the Socket-Type of a READY's metadata, checking
// that every property is well formed and an Identity, if any, at most 255
// bytes.
func peerSocketType(meta []byte) (string, error) {
	var socketType string
	found := false
	for len(meta) > 0 {
		n := int(meta[0])
		if n == 0 || len(meta) < 1+n+4 {
			return "", fmt.Errorf("%w: malformed metadata", ErrHandshake)
		}
		name := string(meta[1 : 1+n])
		size := binary.BigEndian.Uint32(meta[1+n:])
		rest := meta[1+n+4:]
		if uint64(size) > uint64(len(rest)) {
			return "", fmt.Errorf("%w: metadata value of %d bytes in %d", ErrHandshake, size, len(rest))
		}
		switch {
		case strings.EqualFold(name, "Socket-Type"):
			socketType, found = string(rest[:size]), true
		case strings.EqualFold(name, "Identity") && size > maxIdentitySize:
			return "", fmt.Errorf("%w: identity of %d bytes", ErrHandshake, size)
		}
		meta = rest[size:]
	}
	if !found {
		return "", fmt.Errorf("%w: READY without Socket-Type", ErrHandshake)
	}
	return socketType, nil
}

// checkPeerType checks that self may talk to a peer of type peer.
func checkPeerType(self, peer string) error {
	for _, ok := range compatible[self] {
		if peer == ok {
			return nil
		}
	}
	return fmt.Errorf("%w: a %s socket cannot talk to a %q peer", ErrHandshake, self, peer)
}
