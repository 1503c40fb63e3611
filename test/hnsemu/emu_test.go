package hnsemu

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func start(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() { _ = New().Serve(l) }()
	return l.Addr().String()
}

// TestWireAndSchema drives the emulator as the stub DLLs do.
func TestWireAndSchema(t *testing.T) {
	addr := start(t)
	call := func(fn string, args ...string) (uint32, string, string) {
		t.Helper()
		hr, out, res, err := Call(addr, fn, args...)
		if err != nil {
			t.Fatal(err)
		}
		return hr, out, res
	}
	if hr, out, _ := call("HNSCall", "GET", "/globals/version", ""); hr != 0 || !strings.Contains(out, `"Major":15`) {
		t.Fatalf("version: %#x %s", hr, out)
	}
	settings := `{"Name":"nat","Type":"NAT","Ipams":[{"Type":"Static","Subnets":[{"IpAddressPrefix":"10.9.0.0/24","Routes":[{"NextHop":"10.9.0.1","DestinationPrefix":"0.0.0.0/0"}]}]}],"SchemaVersion":{"Major":2,"Minor":0}}`
	if hr, _, res := call("HcnCreateNetwork", "00000000-0000-0000-0000-000000000000", settings); hr != 0 || res != "" {
		t.Fatalf("create network: %#x %s", hr, res)
	}
	_, ids, _ := call("HcnEnumerateNetworks", `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":"{\"Name\":\"nat\"}"}`)
	var list []string
	if err := json.Unmarshal([]byte(ids), &list); err != nil || len(list) != 1 {
		t.Fatalf("enumerate by name: %s %v", ids, err)
	}
	if _, none, _ := call("HcnEnumerateNetworks", `{"Filter":"{\"Name\":\"other\"}"}`); none != "[]" {
		t.Fatalf("filter ignored: %s", none)
	}
	// handles come back in the response header; open -> query -> close
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("HcnOpenNetwork 1\n" + strconv.Itoa(len(list[0])) + "\n" + list[0])); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 64)
	n, _ := c.Read(head)
	fields := strings.Fields(string(head[:n]))
	if len(fields) < 2 || fields[0] != "0" || fields[1] == "0" {
		t.Fatalf("open: %q", head[:n])
	}
	hr, props, _ := call("HcnQueryNetworkProperties", fields[1], "")
	if hr != 0 || !strings.Contains(props, `"IpAddressPrefix":"10.9.0.0/24"`) || !strings.Contains(props, `"Type":"NAT"`) {
		t.Fatalf("query: %#x %s", hr, props)
	}
	// HNS errors: HRESULT plus an error record
	hr, _, res := call("HcnOpenEndpoint", "6B1F3E2A-0000-4000-8000-000000000000")
	if hr != hrNotFound || !strings.Contains(res, `"Success":false`) {
		t.Fatalf("missing endpoint: %#x %s", hr, res)
	}
	if hr, _, _ := call("HcnCreateEndpoint", "12345", "", "{}"); hr != uint32(hcn.CodeOf(hcn.ErrInvalid)) {
		t.Fatalf("bad network handle: %#x", hr)
	}
	if hr, _, _ := call("HcnDeleteNetwork", list[0]); hr != hrNotImpl {
		t.Fatalf("unemulated call: %#x", hr)
	}
}
