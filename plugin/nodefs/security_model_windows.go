//go:build windows && sddlmodel

package nodefs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

// A test build's security descriptors (go build -tags sddlmodel): wine
// stores no ACLs (every file reads back as its user's, with full
// control), so a test that runs the .exe under wine against a node's
// folders models their DACLs in a file named by NRI_HCN_PORTMAP_SDDL_MODEL
// (JSON, SDDLModel). Never in a release build: the tag is a test's alone,
// and TestReleaseBuildReadsNoSDDLModel checks the release .exe.

// SDDLModel is the model: an object's SDDL by its exact path, else by the
// longest prefix (a folder and what is under it) and its kind; an object
// the model does not name reads as the OS says.
type SDDLModel struct {
	Paths map[string]string `json:"paths"`
	Under []struct {
		Prefix string `json:"prefix"`
		Dir    string `json:"dir"`
		File   string `json:"file"`
	} `json:"under"`
}

const modelEnv = "NRI_HCN_PORTMAP_SDDL_MODEL"

func clean(p string) string { return strings.ToLower(filepath.Clean(p)) }

func readModel(name string) (SDDLModel, error) {
	var m SDDLModel
	data, err := os.ReadFile(name)
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(data, &m)
}

// setPrivate, modelled, writes the folder's new descriptor into the
// model, as Windows would keep it on the folder.
func setPrivate(path string) error {
	name := os.Getenv(modelEnv)
	if name == "" {
		return setObjectPrivate(path)
	}
	m, err := readModel(name)
	if err != nil {
		return err
	}
	for p := range m.Paths {
		if clean(p) == clean(path) {
			delete(m.Paths, p)
		}
	}
	if m.Paths == nil {
		m.Paths = map[string]string{}
	}
	m.Paths[path] = privateOwned
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(name, data, 0o644)
}

func security(path string, k Kind) (string, error) {
	name := os.Getenv(modelEnv)
	if name == "" {
		return objectSecurity(path)
	}
	m, err := readModel(name)
	if err != nil {
		return "", err
	}
	for p, sddl := range m.Paths {
		if clean(p) == clean(path) {
			return sddl, nil
		}
	}
	best, sddl := -1, ""
	for _, u := range m.Under {
		pre := clean(u.Prefix)
		if p := clean(path); (p == pre || strings.HasPrefix(p, strings.TrimSuffix(pre, `\`)+`\`)) && len(pre) > best {
			best, sddl = len(pre), u.File
			if k == Dir {
				sddl = u.Dir
			}
		}
	}
	if best >= 0 {
		return sddl, nil
	}
	return objectSecurity(path)
}
