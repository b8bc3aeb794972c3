package dashboard_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/vramhq/vram/serve/dashboard"
)

// The daemon hands the dashboard to the API's handler, which mounts it at "/"
// (api.Options.UI). Standing alone, it serves its files like this.
func ExampleHandler() {
	mux := http.NewServeMux()
	mux.Handle("/", dashboard.Handler())

	for _, path := range []string{"/", "/app.js", "/nope"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, rec.Code, rec.Header().Get("Content-Type"))
	}
	// Output:
	// / 200 text/html; charset=utf-8
	// /app.js 200 text/javascript; charset=utf-8
	// /nope 404 text/plain; charset=utf-8
}
