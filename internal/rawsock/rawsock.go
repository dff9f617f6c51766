package rawsock

import "net"

// MaxIov is the most slices one writev takes here (TryWritev writes no
// more); Writev writes longer ones in several.
const MaxIov = 128

// Listener returns l with every accepted connection wrapped (Wrap). A TLS
// listener over it (tls.NewListener) then reads and writes its records
// with raw syscalls too, which a *tls.Conn, having no descriptor of its
// own, cannot get from Wrap.
func Listener(l net.Listener) net.Listener { return listener{l} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}
