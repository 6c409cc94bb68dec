package frontdoor

import (
	"context"
	"testing"

	"github.com/tokengate/tokengate/pkg/service"
)

// TestCheckMetadata: an allowed Check carries no dynamic metadata; a
// denied one carries the service's, which names the rule that refused.
func TestCheckMetadata(t *testing.T) {
	f := newFixture(t, testPolicy)
	ea := f.doors.ExtAuthz()
	req := checkRequest("10.0.0.9", nil, "/", nil)
	for range 2 {
		resp, err := ea.Check(context.Background(), req)
		if err != nil || resp.DynamicMetadata != nil {
			t.Fatalf("allowed: %v %v", resp, err)
		}
	}
	resp, err := ea.Check(context.Background(), req)
	if err != nil || resp.GetDeniedResponse() == nil {
		t.Fatalf("third: %v %v", resp, err)
	}
	md := resp.DynamicMetadata.GetFields()
	if md[service.MetaRule].GetStringValue() != "per-client" || md[service.MetaResult].GetStringValue() != "over_limit" || md[service.MetaDomain].GetStringValue() != "edge" {
		t.Fatalf("metadata %v", md)
	}
}
