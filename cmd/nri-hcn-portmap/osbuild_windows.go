package main

import "golang.org/x/sys/windows"

// osBuild reads the node's Windows build (RtlGetVersion: the build the OS
// says, not the one a manifest lets it claim), for doctor.
func osBuild() func() (uint32, error) {
	return func() (uint32, error) { return windows.RtlGetVersion().BuildNumber, nil }
}
