//go:build !windows

package main

// osBuild: not a Windows node, no build to read.
func osBuild() func() (uint32, error) { return nil }
