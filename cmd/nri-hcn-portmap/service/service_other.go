//go:build !windows

package service

import (
	"errors"
	"runtime"
)

var errNotWindows = errors.New("Windows services exist only on Windows, this is " + runtime.GOOS)

// IsService is false off Windows.
func IsService() (bool, error) { return false, nil }

// Run fails off Windows.
func Run(string, RunFunc, func()) error { return errNotWindows }

// Exists is false off Windows.
func Exists(string) bool { return false }

// ReportError does nothing off Windows (there is no event log).
func ReportError(string, string) {}

// Available fails off Windows.
func Available() error { return errNotWindows }

// Install fails off Windows.
func Install(Plan) error { return errNotWindows }

// Uninstall fails off Windows.
func Uninstall(string) error { return errNotWindows }

// Absent: no Windows service is installed where there is no Windows.
func Absent(string) error { return nil }
