package main

import (
	"bytes"
	"strings"
	"testing"
)

// The demo (make demo, the README's command for the plugin's main job)
// ends as it means: every pod mapped or refused as it says, the summary
// last.
func TestTheDemoEndsAsItMeans(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, want := range []string{"admission.pod_security = \"off\"", "admission.network_policy = \"off\"", "refused, as meant (RDP's port is on the node's deny list)",
		"== summary: 4 pods mapped, 3 refused as meant, 0 unexpected"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the demo does not say %q:\n%s", want, out.String())
		}
	}
	// issue 48: a refusal in the plugin's words, not gRPC's
	if strings.Contains(out.String(), "rpc error: code") {
		t.Errorf("the demo prints gRPC's prefix before the plugin's reason:\n%s", out.String())
	}
}
