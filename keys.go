package baton

import (
	"fmt"
	"strings"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/machine"
)

// MaxNameLen is the longest lock name accepted, in bytes.
const MaxNameLen = keyspace.MaxNameLen

// checkName rejects names that cannot be locked safely (see
// keyspace.CheckName).
func checkName(name string) error {
	if why := keyspace.CheckName(name); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidName, why)
	}
	return nil
}

func truncate(s string) string { return keyspace.Truncate(s) }

// opError says which call failed on which name: "baton: <op>: <cause>".
type opError = machine.OpError

// nameOfLockKey returns the lock name of a lock key, or false for any other
// key (companion keys end in "}:x").
func nameOfLockKey(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+":{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	return rest[:len(rest)-1], true
}

// slot is the Redis Cluster hash slot of key (CRC16/XMODEM of its hash tag).
func slot(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
