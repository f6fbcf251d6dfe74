package simredis

import (
	"testing"

	"github.com/batonlock/baton/internal/redistest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, redistest.KnownLeaks()...) }
