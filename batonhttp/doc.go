// Package batonhttp serves a read-only view of baton's locks for operators:
// which locks this process holds and awaits, and what Redis holds under the
// key prefix for every instance.
//
// Mount it on an internal or authenticated mux, as the view names every
// lock and owner:
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
//   - scope=redis[&match=GLOB][&cursor=C][&prefix=P]: one page of the names
//     Redis holds under the key prefix, written by any instance. Pass
//     next_cursor back as cursor until it is "". The page is one SCAN page
//     (on Redis Cluster, of one primary at a time), so a request costs a
//     bounded amount of Redis work however many names there are; a page may
//     be empty while next_cursor is not. Names are sorted within a page,
//     not across pages. As with SCAN, a name that exists during the whole
//     walk is listed at least once and may be listed twice; one created or
//     deleted meanwhile may be missed.
//   - scope=redis&name=NAME: one name with its queue of waiting sessions.
//
// prefix may be given only as the client's own key prefix: the handler
// reads Redis through the client's connections, which are bound to it.
//
// Redis calls are bounded by the request's context and by 5 seconds.
//
// # JSON
//
// The response is JSON unless the Accept header prefers text/html (a
// browser's does), in which case it is a plain HTML page with the same
// content as tables. Field names are stable snake_case. Every uint64 (token,
// fence) is a decimal string: tokens exceed 2^53, above which JavaScript
// numbers lose precision. Times are UTC RFC 3339 with nanoseconds,
// durations whole milliseconds. Lists are never null. The process scope:
//
//	{
//	  "scope": "process",
//	  "sessions": [                     // the default session first, then by creation
//	    {
//	      "id": "502b6f81442d47af12c463caad464958-1",  // Session.ID: the member part of its owner tokens
//	      "default": true,
//	      "lease_ttl_ms": 5000,
//	      "held": [                     // sorted by name
//	        {
//	          "name": "order:42",
//	          "token": "1839198991022492672",
//	          "owner": "502b6f81442d47af12c463caad464958-1:1796092764670403",
//	          "acquired_at": "2026-12-01T02:39:24.670445918Z",
//	          "lease_deadline": "2026-12-01T02:39:29.492440185Z"
//	        }
//	      ],
//	      "waiting": [{"name": "invoice:7", "goroutines": 2}]  // sorted by name
//	    }
//	  ],
//	  "stats": {"acquired": 2, "local_handoffs": 0, "granted": 0, "waits": 0,
//	            "timeouts": 0, "lost": 0, "renewal_errors": 0, "held": 1}
//	}
//
// lease_deadline is the holder's local deadline: the lock is lost then
// unless a renewal succeeds first. The redis scope, listing:
//
//	{
//	  "scope": "redis",
//	  "prefix": "baton",
//	  "match": "order:*",              // as given; "" lists every name
//	  "cursor": "",                     // as given
//	  "next_cursor": "2816",            // opaque; "" when the walk is done
//	  "names": [                        // sorted by name within the page
//	    {
//	      "name": "order:42", "held": true, "marker": false, "foreign": false,
//	      "value": "", "owner": "502b6f81442d47af12c463caad464958-1:1796092764670403",
//	      "token": "1839198991022492672", "fence": "1796092764670403",
//	      "lease_left_ms": 4990, "queue_len": 1
//	    }
//	  ]
//	}
//
// held, marker (free, with the last fence kept) and foreign (a value baton
// did not write, shown in value) exclude one another; all three false
// means the name has no lock key (sessions may still queue for it). owner is "" and lease_left_ms 0 unless held.
// With name=NAME the answer is {"scope": "redis", "prefix": ..., "lock":
// {...}}, the object as above plus the waiting sessions, oldest first:
//
//	"queue": [{"member": "502b6f81442d47af12c463caad464958-2",
//	           "deadline": "2026-12-01T02:39:21.61Z", "left_ms": 4987, "lease_ms": 5000}]
//
// deadline is when Redis drops the entry unless its session refreshes it,
// by Redis's clock; left_ms is the same as time left, free of clock skew;
// lease_ms is the lease the session asks for.
//
// # Errors
//
// Errors are {"error": "message"} (an HTML page for browsers) with status
// 400 for a bad parameter (including a cursor the handler did not hand out
// and a malformed match glob), 502 when Redis fails or does not answer in
// time, and 503 once the client is closed, detected as its default session
// being closed. A closed client's counters still work, so the process
// scope then answers 503 with "stats" beside "error".
package batonhttp
