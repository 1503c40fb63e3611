//go:build windows

package service

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows"
)

// Issue 53: a start-up refusal reported by the service reaches the Windows
// event log as an error of its source. The child process reports, as the
// service would. On Windows the text is read back from the Application log
// (wevtutil); under wine, whose event log writes an error event's text on
// its eventlog debug channel (to the process's Unix stderr, which no
// Windows process can read), the e2e-windows suite runs this child from
// Linux and reads it there (test/e2ewin, TestAStartUpRefusalReachesWinesEventLog);
// here the child must report without failing.
func TestAStartUpRefusalReachesTheEventLog(t *testing.T) {
	const source = "nri-hcn-portmap-eventlog-test"
	if msg := os.Getenv("NRI_HCN_PORTMAP_EVENTLOG_CHILD"); msg != "" {
		ReportError(source, msg)
		return
	}
	msg := fmt.Sprintf("nri-hcn-portmap cannot start: config: the test's refusal %d", time.Now().UnixNano())
	child := exec.Command(os.Args[0], "-test.run=^TestAStartUpRefusalReachesTheEventLog$")
	child.Env = append(os.Environ(), "NRI_HCN_PORTMAP_EVENTLOG_CHILD="+msg, "WINEDEBUG=err+eventlog")
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("the reporting child: %v\n%s", err, out)
	}
	if windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil {
		return // read from Linux: test/e2ewin
	}
	log, err := exec.Command("wevtutil", "qe", "Application", "/q:*[System[Provider[@Name='"+source+"']]]", "/c:5", "/rd:true", "/f:text").CombinedOutput()
	if err != nil || !strings.Contains(string(log), msg) {
		t.Fatalf("the Application log does not hold the refusal %q: %v\n%s", msg, err, log)
	}
}
