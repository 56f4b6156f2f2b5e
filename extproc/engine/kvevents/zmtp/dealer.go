package zmtp

import "context"

// Dealer is a DEALER socket connected to one ROUTER. It is not safe for
// concurrent use.
type Dealer struct {
	c    *conn
	stop func() bool
}

// DialDealer connects to the ROUTER at endpoint. The connect and
// handshake end within o.HandshakeTimeout; ctx ending closes the socket,
// ending a Send or Recv in progress.
func DialDealer(ctx context.Context, endpoint string, o Options) (*Dealer, error) {
	o = o.withDefaults()
	c, stop, err := dialHandshake(ctx, endpoint, typeDealer, &o)
	if err != nil {
		return nil, err
	}
	return &Dealer{c: c, stop: stop}, nil
}

// Send sends one message, within the write timeout.
func (d *Dealer) Send(frames ...[]byte) error {
	return d.c.closedError(d.c.writeMessage(frames...))
}

// Recv returns the next message. It waits until one comes, the connection
// ends or the context given to DialDealer ends.
func (d *Dealer) Recv() (*Message, error) {
	m, err := d.c.readMessage()
	if err != nil {
		return nil, d.c.closedError(err)
	}
	return m, nil
}

// Close closes the connection.
func (d *Dealer) Close() error {
	d.stop()
	d.c.shut()
	return nil
}
