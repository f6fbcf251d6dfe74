package admin_test

import (
	"testing"

	"github.com/batonlock/baton/admin"
	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, redistest.KnownLeaks()...)
}

// newAdmin returns an Admin with its own connections, as an operator's.
func newAdmin(t testing.TB, opt rueidis.ClientOption) *admin.Admin {
	t.Helper()
	a, err := admin.New(locktest.NewRueidis(t, opt), "")
	if err != nil {
		t.Fatalf("admin.New: %v", err)
	}
	return a
}
