package main

import (
	"net"
	"os"
)

// sdNotify sends state ("READY=1", "STOPPING=1", "RELOADING=1") to the
// service manager when it asked for readiness notification (systemd's
// Type=notify sets NOTIFY_SOCKET; a leading '@' names an abstract socket,
// which the net package maps). Without NOTIFY_SOCKET it does nothing.
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
