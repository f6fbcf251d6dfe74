package batongocron_test

import (
	"context"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/batonlock/baton"
	batongocron "github.com/batonlock/baton/gocron"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/rueidis"
)

// Every instance runs this; each run of "report" happens on one of them.
func ExampleNewLocker() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Runs every minute; instances whose clocks and timers agree within
	// MinHold-LockTimeout (5s) never both run the same minute.
	lk, err := batongocron.NewLocker(c, batongocron.LockerOptions{
		MinHold:     10 * time.Second,
		LockTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Close() // waits for the last run's MinHold

	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(lk))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown() // first: runs before lk.Close and c.Close

	_, err = s.NewJob(
		gocron.CronJob("* * * * *", false),
		gocron.NewTask(func() { log.Print("sending the report") }),
		gocron.WithName("report"), // the lock name: the same on every instance
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
}

// Every instance runs this; only the leader of the election "reports" runs
// the jobs.
func ExampleNewElector() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	el, err := batongocron.NewElector(c, "reports", batongocron.ElectorOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer el.Close() // resigns: another instance leads at once, runs after Takeover

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(el))
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown() // first: runs before el.Close and c.Close

	_, err = s.NewJob(
		gocron.DurationJob(time.Minute),
		gocron.NewTask(func() { log.Print("sending the report") }),
	)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	<-ctx.Done()
}
