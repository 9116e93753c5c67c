package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/choirhq/choir/rpc/admin"
)

// TestFillEscapesEachSegmentAsTheMuxUnescapesIt sends values that need
// escaping through Fill and checks that the handler's PathValue gives them
// back unchanged.
func TestFillEscapesEachSegmentAsTheMuxUnescapesIt(t *testing.T) {
	t.Parallel()
	var got [2]string
	mux := admin.NewMux(nil)
	admin.Handle(mux, "POST", admin.PathSessionCancel, func(ctx context.Context, _ admin.Empty) (admin.Empty, error) {
		got = [2]string{admin.PathValue(ctx, "id"), admin.PathValue(ctx, "name")}
		return admin.Empty{}, nil
	})
	for _, want := range [][2]string{{"assistant", "build"}, {"a b", "x/y?z#%"}, {"ünï", "edge.2"}} {
		req := httptest.NewRequest("POST", "http://choird"+admin.Fill(admin.PathSessionCancel, want[0], want[1]), nil)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || got != want {
			t.Errorf("%q: HTTP %d, path values %q", want, rec.Code, got)
		}
	}
	for _, values := range [][]string{{"assistant"}, {"a", "b", "c"}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Fill(%s, %q) did not panic", admin.PathSessionCancel, values)
				}
			}()
			admin.Fill(admin.PathSessionCancel, values...)
		}()
	}
}
