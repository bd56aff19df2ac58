package httpguard

import (
	"errors"
	"fmt"
	"net"
	"strconv"
)

// CheckAddr checks a listen address as net.Listen("tcp", addr) reads it, so that a
// command can refuse a bad one when it parses its flags, before it connects to anything:
// HOST:PORT with the host optional (an IP, or a name resolved when listening) and the port
// a number from 0 (a free port) to 65535 or a service name. The empty address, which
// net.Listen takes as a free port on every interface, is refused too: what it means
// (the default, no server) is the command's to say.
func CheckAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return errors.New("want HOST:PORT, e.g. 127.0.0.1:8080")
	}
	if n, err := strconv.Atoi(port); err == nil || errors.Is(err, strconv.ErrRange) {
		if err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("port %s out of range (want 0 to 65535; 0 picks a free port)", port)
		}
		return nil
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("unknown port %q (want a number from 0 to 65535)", port)
	}
	return nil
}
