// Package zmtp is a small, strict implementation of ZMTP 3.x, ZeroMQ's wire
// protocol, limited to what the KV-event subscriber needs: the NULL
// security mechanism, a SUB socket that dials one PUB (DialSub), a SUB
// listener that accepts many PUB peers (Bind, which learns the endpoint
// before any goroutine starts, then ServeSub), and a DEALER that dials
// a ROUTER (DialDealer). Endpoints are tcp://HOST:PORT or ipc://PATH.
//
// It replaces a general ZeroMQ library because its peers are engines
// tollgate does not control and, in bind mode, anything that reaches the
// port:
//
//   - every size and count a peer announces is checked against a limit
//     before anything is allocated: a frame's size as its header is read,
//     a message's frames as each one starts, and a frame's body grows only
//     as its bytes arrive, so an announced size costs nothing by itself;
//   - a listener holds a bounded number of connections, a bounded queue of
//     messages and a bounded number of buffered bytes;
//   - every connect and handshake has a deadline, and every write a
//     timeout;
//   - a context closes every connection at once, whatever the peer does;
//   - it is pure Go, so the tollgate binary stays static (no cgo).
//
// A connection that breaks a limit or the protocol is closed with an error
// that Reason classifies; the caller counts it and reconnects. In a
// listener a bad peer loses only its own connection.
//
// Peers may speak ZMTP 3.0 or 3.1 (libzmq 4.x, go-zeromq). Subscriptions
// are sent in the message form (0x01 and the prefix), which both accept; a
// PING is answered with a PONG and an ERROR ends the connection.
package zmtp
