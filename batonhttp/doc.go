// Package batonhttp serves a read-only view of baton's locks, semaphores
// and elections for operators: what this process holds and awaits, and
// what Redis holds under the key prefix for every instance.
//
// Mount it on an internal or authenticated mux, as the view names every
// lock, owner and instance:
//
//	http.Handle("/debug/baton", batonhttp.Handler(c))
//
// # Requests
//
// Only GET (and HEAD) is served; other methods get 405 with an Allow header.
// Unknown or repeated query parameters get 400, so that a typo does not
// silently show another view.
//
//   - no parameters (or scope=process): this process, from memory, without
//     asking Redis.
//   - scope=redis[&match=GLOB][&cursor=C][&prefix=P]: one page of the
//     locks, semaphores and elections Redis holds under the key prefix,
//     written by any instance. Pass next_cursor back as cursor until it is
//     "". The page is one SCAN page (on Redis Cluster, of one primary at a
//     time), so a request costs a bounded amount of Redis work however many
//     names there are; a page may be empty while next_cursor is not. Items
//     are sorted by name, then kind (lock, semaphore, election), within a
//     page, not across pages. As with SCAN, a name that exists during the
//     whole walk is listed at least once and may be listed twice; one
//     created or deleted meanwhile may be missed.
//   - scope=redis&name=NAME: one name, every kind of it, with the queues of
//     waiting sessions.
//
// prefix may be given only as the client's own key prefix: the handler
// reads Redis through the client's connections, which are bound to it.
//
// Redis calls are bounded by the request's context and by 5 seconds.
//
// # HTML
//
// A browser (an Accept header that prefers text/html) gets the same
// content as pages for operators: which instance, Redis and key prefix the
// page shows; times relative to the moment of reading ("held 3.9 s",
// "lease left 2.1 s"); permits and leaderships named as such; a "refresh
// every 2 s" toggle (plain JavaScript, remembered by the browser). The
// pages fit a 1280-pixel window: long names, members and instances wrap.
//
// # JSON
//
// Otherwise the response is JSON. Field names are stable snake_case. Every
// uint64 (token, fence) is a decimal string: tokens exceed 2^53, above
// which JavaScript numbers lose precision. Times are UTC RFC 3339 with
// nanoseconds, durations whole milliseconds. Lists are never null. An
// instance is a client's Options.Instance ("hostname:pid" by default), ""
// when Redis has no record of it. The process scope:
//
//	{
//	  "scope": "process",
//	  "instance": "web-1:4242",         // Client.Instance
//	  "prefix": "baton",
//	  "redis": ["10.0.0.5:6379"],       // the nodes the client's connections reach
//	  "sessions": [                     // the default session first, then by creation
//	    {
//	      "id": "502b6f81442d47af12c463caad464958-1",  // Session.ID: the member part of its owner tokens
//	      "default": true,
//	      "lease_ttl_ms": 5000,
//	      "held": [                     // sorted by name
//	        {
//	          "kind": "lock",           // or "semaphore" (a permit), "election" (the leadership)
//	          "name": "order:42",
//	          "token": "1839198991022492672",
//	          "owner": "502b6f81442d47af12c463caad464958-1:1796092764670403",
//	          "acquired_at": "2026-12-01T02:39:24.670445918Z",
//	          "lease_deadline": "2026-12-01T02:39:29.492440185Z"
//	        }
//	      ],
//	      "waiting": [{"name": "invoice:7", "goroutines": 2}]  // sorted by name; all kinds
//	    }
//	  ],
//	  "stats": {"acquired": 2, "local_handoffs": 0, "granted": 0, "waits": 0,
//	            "timeouts": 0, "lost": 0, "renewal_errors": 0, "held": 1}
//	}
//
// lease_deadline is the holder's local deadline: it is lost then unless a
// renewal succeeds first. A permit's owner names its slot
// ("<id>.<slot>:<fence>"), a leadership's its campaign ("<id>.e<slot>:<fence>").
// The redis scope, listing:
//
//	{
//	  "scope": "redis",
//	  "prefix": "baton",
//	  "redis": ["10.0.0.5:6379"],
//	  "match": "order:*",              // as given; "" lists every name
//	  "cursor": "",                     // as given
//	  "next_cursor": "2816",            // opaque; "" when the walk is done
//	  "names": [                        // sorted by name, then kind, within the page
//	    {
//	      "kind": "lock", "name": "order:42", "state": "held", "held": true, "cached": false,
//	      "marker": false, "foreign": false,
//	      "value": "", "owner": "502b6f81442d47af12c463caad464958-1:1796092764670403",
//	      "instance": "web-1:4242",
//	      "token": "1839198991022492672", "fence": "1796092764670403",
//	      "lease_left_ms": 4990, "limit": 0, "queue_len": 1,
//	      "holders": [{"member": "502b6f81442d47af12c463caad464958-1",
//	                   "owner": "502b6f81442d47af12c463caad464958-1:1796092764670403",
//	                   "instance": "web-1:4242", "token": "1839198991022492672",
//	                   "fence": "1796092764670403", "lease_left_ms": 4990,
//	                   "value": "", "pending": false}]
//	    }
//	  ]
//	}
//
// kind is "lock", "semaphore" or "election": a name may be all three, each
// with keys of its own, and is then listed once per kind. state is one
// word, as baton ls and show and the page say it: "held" (a lock's
// holder, permits held, an election's leader), "cached", "pending",
// "free" or "foreign" (docs/operating.md, "State words"). held, marker
// (free, with the last fence kept) and foreign (a key baton did not write,
// its value in value) exclude one another; all three false and no holders
// means the name has no key of that kind (sessions may still queue for
// it). cached marks a held lock its session keeps cached between uses
// (baton.Options.CacheIdle): taken and released without Redis until
// another session asks for it (admin.Name.Cached); its state is
// "cached". holders lists the live holders by fence: a held lock's
// one, a semaphore's permit holders (up to limit), an election's holder.
// For a lock and an election, owner, instance and lease_left_ms are the
// holder's (the leader's), and "" and 0 when there is none; an election's
// value is its leader's campaign value. An election's holder with
// "pending": true was granted the leadership and has not taken it: it does
// not lead, and held is false. A semaphore's owner and instance are "":
// see holders; its token and fence are the last ones issued.
//
// With name=NAME the answer is {"scope": "redis", "prefix": ..., "redis":
// ..., "lock": {...}, "semaphore": {...}, "election": {...}}: "lock"
// always (free when it has no keys), "semaphore" and "election" when the
// name has keys of that kind, each the object as above plus the waiting
// sessions, oldest first:
//
//	"queue": [{"member": "502b6f81442d47af12c463caad464958-2", "instance": "web-2:977",
//	           "value": "", "deadline": "2026-12-01T02:39:21.61Z", "left_ms": 4987, "lease_ms": 5000}]
//
// deadline is when Redis drops the entry unless its session refreshes it,
// by Redis's clock; left_ms is the same as time left, free of clock skew;
// lease_ms is the lease the session asks for; value is an election
// campaign's.
//
// # Errors
//
// Errors are {"error": "message"} (an HTML page for browsers) with status
// 400 for a bad parameter (including a cursor the handler did not hand out
// and a malformed match glob), 502 when Redis fails or does not answer in
// time (and when it refuses SCAN to the client's user, whom the README's
// library ACL line does not give it: the message says to add +scan, and
// the page offers to look one name up, which needs no SCAN), and 503 once
// the client is closed, detected as its default session
// being closed. A closed client's counters still work, so the process
// scope then answers 503 with "stats" beside "error".
package batonhttp
