module github.com/batonlock/baton/batontest

go 1.26.0

replace github.com/batonlock/baton => ../

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/batonlock/baton v0.0.0-00010101000000-000000000000
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/redis/rueidis v1.0.79 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
