package hcnsim

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

func jsonDecode(res *http.Response, v any) error { return json.NewDecoder(res.Body).Decode(v) }
