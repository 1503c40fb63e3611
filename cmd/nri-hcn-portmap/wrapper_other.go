//go:build !windows

package main

import (
	"context"

	"github.com/sirupsen/logrus"
)

// stopWithWrapper: only HostProcess containers (Windows) wrap the plugin.
func stopWithWrapper(ctx context.Context, _ *logrus.Entry) context.Context { return ctx }
