package lockers

import (
	"errors"

	"github.com/batonlock/baton"
)

func isNotAcquired(err error) bool { return errors.Is(err, baton.ErrNotAcquired) }
