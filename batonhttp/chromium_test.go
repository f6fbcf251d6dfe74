package batonhttp

import (
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton"
	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/locktest"
)

// viewport is the browser window the pages must fit without scrolling
// sideways, lease column included.
const viewportW, viewportH = 1280, 900

// TestChromium renders the pages in headless Chromium, which sends its own
// Accept header and would run any script the page let through, and checks
// that each fits a 1280-pixel window: nothing reaches past the viewport's
// width (measured in the browser, and seen on screenshots).
func TestChromium(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium); TestHTML still checks the page by parsing it")
	}
	st := newHTMLState(t)
	dom := chromium(t, bin, "--dump-dom", st.srv.URL+"/")
	st.check(t, parseHTML(t, dom))

	// What a busy process shows: a long name, permits held and awaited, a
	// leadership, a read lock with a writer waiting, beside the hostile
	// name; its instance recorded in Redis.
	ctx := locktest.CtxTimeout(t, 30*time.Second)
	locktest.SetInstance(t, locktest.NewRueidis(t, st.opt), st.c)
	long := "orders/" + strings.Repeat("eu-west-1/tenant-4711/", 12) + "invoice-run"
	locktest.Lock(t, st.c, long)
	locktest.Acquire(t, locktest.Semaphore(t, st.c, "provider-gateway", 2))
	gw, err := st.s2.Semaphore("provider-gateway", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	locktest.Async(t, gw.Acquire)
	locktest.WaitQueuedKey(t, st.opt, keyspace.SemKey(baton.DefaultKeyPrefix, "provider-gateway")+":q", 1)
	locktest.Campaign(t, locktest.Election(t, st.c, "scheduler"), "web-1:4242 since boot")
	locktest.RLock(t, locktest.RWMutex(t, st.c, "catalog"))
	rw, err := st.s2.RWMutex("catalog")
	if err != nil {
		t.Fatal(err)
	}
	locktest.Async(t, rw.Lock)
	locktest.WaitQueuedKey(t, st.opt, locktest.RWQueue("catalog"), 1)
	mux := http.NewServeMux()
	mux.Handle("/debug/baton", Handler(st.c))
	pages := []string{"/debug/baton", "/debug/baton?scope=redis", "/debug/baton?" + redisQuery("", "name", "provider-gateway").Encode(),
		"/debug/baton?" + redisQuery("", "name", long).Encode(), "/debug/baton?" + redisQuery("", "name", "scheduler").Encode(),
		"/debug/baton?" + redisQuery("", "name", "catalog").Encode()}
	mux.HandleFunc("/probe", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		probe.Execute(w, pages)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	dom = chromium(t, bin, fmt.Sprintf("--window-size=%d,%d", viewportW, viewportH), "--dump-dom", srv.URL+"/probe")
	doc := parseHTML(t, dom)
	for i, page := range pages {
		out := doc.byID(fmt.Sprintf("out%d", i))
		var m struct {
			ScrollWidth, ClientWidth, Right int
			Worst, Title                    string
		}
		if out == nil || json.Unmarshal([]byte(out.textContent()), &m) != nil {
			t.Fatalf("%s: no measure in the probe's DOM:\n%s", page, dom)
		}
		t.Logf("%s: %+v", page, m)
		if !strings.HasPrefix(m.Title, "baton: ") {
			t.Errorf("%s: title %q: a script ran or the page is not ours", page, m.Title)
		}
		if m.ClientWidth < viewportW-20 || m.ScrollWidth > m.ClientWidth || m.Right > m.ClientWidth {
			t.Errorf("%s overflows a %d px window: scrollWidth %d, clientWidth %d, %s reaches %d px",
				page, viewportW, m.ScrollWidth, m.ClientWidth, m.Worst, m.Right)
		}
	}

	dir := os.Getenv("BATONHTTP_SCREENSHOTS") // to keep them and look
	if dir == "" {
		dir = t.TempDir()
	}
	for _, shot := range []struct{ file, page string }{{"process.png", pages[0]}, {"redis.png", pages[1]}, {"name.png", pages[2]}} {
		path := filepath.Join(dir, shot.file)
		chromium(t, bin, "--hide-scrollbars", fmt.Sprintf("--window-size=%d,%d", viewportW, viewportH), "--screenshot="+path, srv.URL+shot.page)
		checkRightEdge(t, path)
	}
}

// probe measures each page in an iframe as wide as the window: the
// document's scrollWidth against its clientWidth, and the right edge of
// its widest element, written into the probe's DOM for --dump-dom.
var probe = template.Must(template.New("probe").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><style>body{margin:0}iframe{display:block;border:0;width:1280px;height:900px}</style>
<script>
function measure(i) {
  var f = document.getElementById("f" + i), d = f.contentDocument, de = d.documentElement, right = 0, worst = "";
  var all = d.body.getElementsByTagName("*");
  for (var j = 0; j !== all.length; j++) {
    var r = all[j].getBoundingClientRect().right;
    if (r > right) { right = r; worst = all[j].tagName + (all[j].id ? "#" + all[j].id : ""); }
  }
  document.getElementById("out" + i).textContent = JSON.stringify({ScrollWidth: de.scrollWidth,
    ClientWidth: de.clientWidth, Right: Math.ceil(right), Worst: worst, Title: d.title});
}
</script></head><body>
{{range $i, $p := .}}<pre id="out{{$i}}"></pre><iframe id="f{{$i}}" src="{{$p}}" onload="measure({{$i}})"></iframe>
{{end}}</body></html>
`))

// checkRightEdge fails unless the screenshot at path is the window's size
// and its rightmost columns are page background: a table wider than the
// window would cross them with its borders.
func checkRightEdge(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", path, err)
	}
	b := img.Bounds()
	if b.Dx() != viewportW || b.Dy() != viewportH {
		t.Fatalf("screenshot %s is %dx%d, want %dx%d", path, b.Dx(), b.Dy(), viewportW, viewportH)
	}
	for x := b.Max.X - 8; x < b.Max.X; x++ {
		for y := b.Min.Y; y < b.Max.Y; y++ {
			if r, g, bl, _ := img.At(x, y).RGBA(); r < 0xf000 || g < 0xf000 || bl < 0xf000 {
				t.Fatalf("screenshot %s: pixel (%d, %d) at the right edge is not background: the page overflows", path, x, y)
			}
		}
	}
	t.Logf("screenshot %s: %dx%d, right edge clear", path, b.Dx(), b.Dy())
}

// chromium runs headless Chromium with args and returns its output.
func chromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--user-data-dir=" + t.TempDir()}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
