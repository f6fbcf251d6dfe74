package batonhttp_test

import (
	"log"
	"net/http"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/batonhttp"
	"github.com/redis/rueidis"
)

// Mount the view on the operators' listener, next to pprof: GET
// /debug/baton shows this process's locks (a table in a browser, JSON for
// curl), and /debug/baton?scope=redis what Redis holds for every instance.
func ExampleHandler() {
	c, err := baton.New(baton.Options{
		Redis: rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	http.Handle("/debug/baton", batonhttp.Handler(c))
	log.Fatal(http.ListenAndServe("127.0.0.1:6060", nil))
}
