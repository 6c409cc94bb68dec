package frontdoor

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestLoginSpellings: with config/examples/front-doors.yaml (5 logins a
// minute per client), six login attempts through forward-auth, each
// spelling /login differently, share one bucket: the sixth is denied.
func TestLoginSpellings(t *testing.T) {
	pol, err := os.ReadFile(filepath.Join("..", "..", "config", "examples", "front-doors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	p := start(t, string(pol))
	for i, path := range []string{"/login", "//login", "/./login", "/%6cogin", "/api/../login", "/login;jsessionid=1"} {
		resp, body := p.forwardAuth(t, "GET", "", map[string]string{
			"X-Forwarded-Method": "POST", "X-Forwarded-Proto": "https", "X-Forwarded-Host": "app.example.com",
			"X-Forwarded-Uri": path + "?next=/", "X-Forwarded-For": "198.51.100.7",
		})
		if i < 5 {
			if resp.StatusCode != 200 {
				t.Fatalf("attempt %d (%s): %d %s", i+1, path, resp.StatusCode, body)
			}
			continue
		}
		var pb problem
		if resp.StatusCode != 429 || json.Unmarshal([]byte(body), &pb) != nil || len(pb.Violated) != 1 || pb.Violated[0] != "login-per-client" {
			t.Fatalf("attempt 6 (%s): %d %s, want 429 from login-per-client", path, resp.StatusCode, body)
		}
	}
}
