//go:build windows

package hcn

import (
	"net/netip"
	"strings"

	"github.com/Microsoft/go-winio/pkg/guid"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func guidOf(s string) (guid.GUID, error) { return guid.FromString(strings.Trim(s, "{}")) }
