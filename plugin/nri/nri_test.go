package nri

import "testing"

// Regression (load and faults, 12): with failure_policy = fail-closed the
// plugin asked the runtime to fail requests it could not answer, so while
// it was down StopPodSandbox and RemovePodSandbox failed too.
func TestFailurePolicyNeverFailsTheRuntimesRequests(t *testing.T) {
	p := failurePolicy()
	if p.GetFailRequest() || !p.GetKeepConnected() {
		t.Fatalf("failure policy %+v: want KeepConnected and never FailRequest", p)
	}
}
