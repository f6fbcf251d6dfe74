module github.com/batonlock/baton/gocron

go 1.26.0

replace github.com/batonlock/baton => ../

require (
	github.com/batonlock/baton v0.0.0-00010101000000-000000000000
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/redis/rueidis v1.0.79
	go.uber.org/goleak v1.3.0
)

require (
	github.com/cenkalti/backoff/v4 v4.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
)
