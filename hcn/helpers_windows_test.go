//go:build windows

package hcn

import (
	"strings"

	"github.com/Microsoft/go-winio/pkg/guid"
)

func guidOf(s string) (guid.GUID, error) { return guid.FromString(strings.Trim(s, "{}")) }
